"""Where a job's tasks come from, however a caller names them: the one loader behind `run_rollouts` and the
trainer integrations, taking what `evsys run` takes.

- a path (`str` or `Path`): a task directory, a directory of tasks, a Harbor `dataset.toml` directory, a
  Python-task dataset (`dataset.toml` + `tasks.jsonl`), a file of repository rows;
- `NAME@VERSION`: a registry dataset (Harbor's format), fetched into the cache once;
- loaded task directories (a `TaskSet` from `load_tasks`, or its `Task`s) or a list of paths;
- in memory: Python tasks (`VerifiedTask`, `PromptTask`, their dict rows, plain prompts) or repository rows
  (`RepoTask`).

A string is a path when something exists there, else a dataset when it reads `NAME@VERSION`; anything else
is refused with a message saying what was looked for (a prompt goes in a list: `["Write a haiku"]`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evsys.datasets import dataset_dir, looks_like_dataset_reference
from evsys.engine.config import AgentSpec, JobConfig
from evsys.engine.plan import plan_trials
from evsys.repo.rows import RepoTask
from evsys.task.loader import TaskSet
from evsys.task.models import Task


@dataclass
class TaskSource:
    """Tasks as the job takes them: `paths` on disk (datasets a job config lists), or repository `rows` and
    `memory` items (Python tasks, their rows, prompts) still to be prepared."""

    paths: list[Path] = field(default_factory=list)
    rows: list[RepoTask] = field(default_factory=list)
    memory: list[Any] = field(default_factory=list)


class TaskSourceError(ValueError):
    """The tasks given cannot be loaded: the message says what was looked for and what to pass instead."""


def _path_of(text: str | Path) -> Path:
    path = Path(text).expanduser()
    if not path.exists():
        raise TaskSourceError(
            f"{str(text)!r} is neither a task directory, a dataset directory or file, nor NAME@VERSION "
            f"(nothing exists at {path.resolve()}); to roll out one prompt, pass a list: [{str(text)!r}]"
        )
    return path


def _sequence_source(items: Sequence[Any]) -> TaskSource:
    if not items:
        raise TaskSourceError("no tasks given: nothing to run")
    if all(isinstance(item, Task) for item in items):
        return TaskSource(paths=[item.path for item in items])
    if all(isinstance(item, Path) for item in items):
        return TaskSource(paths=[_path_of(item) for item in items])
    for index, item in enumerate(items):
        if isinstance(item, Task | Path):
            raise TaskSourceError(
                f"items[{index}] is a {type(item).__name__} among other kinds of items: give task "
                "directories, or repository rows and Python tasks, not a mix"
            )
    rows = [item for item in items if isinstance(item, RepoTask)]
    return TaskSource(rows=rows, memory=[item for item in items if not isinstance(item, RepoTask)])


def registry_reference(items: Any) -> str | None:
    """`items` when it names a registry dataset (`NAME@VERSION`, nothing on disk there), else None."""
    if (
        isinstance(items, str)
        and looks_like_dataset_reference(items)
        and not Path(items).expanduser().exists()
    ):
        return items
    return None


def task_source(items: Any) -> TaskSource:
    """`items` (see the module docstring; a registry dataset given as its local directory) as a
    `TaskSource`; `TaskSourceError` (a ValueError) says what could not be found."""
    if isinstance(items, str | Path):
        return TaskSource(paths=[_path_of(items)])
    if isinstance(items, Task):
        return TaskSource(paths=[items.path])
    if isinstance(items, TaskSet):  # what load_tasks returns: the directory it loaded
        return TaskSource(paths=[items.path])
    if isinstance(items, Mapping):
        raise TaskSourceError("items must be a list of tasks or prompts, not a single one")
    if not isinstance(items, Sequence):
        raise TaskSourceError(
            f"tasks must be a path, NAME@VERSION or a list of tasks, got {type(items).__name__}"
        )
    return _sequence_source(items)


async def resolve_tasks(
    items: Any, *, registry_path: Path | str | None = None, registry_url: str | None = None
) -> TaskSource:
    """`items` (see the module docstring) as a `TaskSource`; a dataset named `NAME@VERSION` is fetched into
    the cache first (from `registry_path`, `registry_url`, or Harbor's public registry)."""
    reference = await asyncio.to_thread(registry_reference, items)
    if reference is not None:
        path = await dataset_dir(reference, registry_path=registry_path, registry_url=registry_url)
        return TaskSource(paths=[path])
    return await asyncio.to_thread(task_source, items)


def tasks_on_disk(paths: Sequence[Path]) -> list[Task]:
    """The tasks a job over `paths` runs, loaded as `evsys run` loads them (datasets, filters of
    `dataset.toml`, rows files), in the plan's order; `TaskSourceError` naming any that failed to load."""
    config = JobConfig(datasets=[Path(p).resolve() for p in paths], agents=[AgentSpec(name="nop")])
    tasks: dict[str, Task] = {}
    failed: list[str] = []
    for planned in plan_trials(config):
        if planned.task is None:
            failed.append(
                f"{planned.config.task_name}: {planned.failure.message if planned.failure else '?'}"
            )
        elif planned.config.task_name not in tasks:
            tasks[planned.config.task_name] = planned.task
    if failed:
        raise TaskSourceError("tasks that did not load: " + "; ".join(failed[:5]))
    return list(tasks.values())
