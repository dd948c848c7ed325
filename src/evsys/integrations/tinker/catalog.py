"""The tasks of an `EvsysRLDataset`: whatever `evsys run` takes, loaded through evsys's one loader
(evsys.engine.sources) and planned once as the trials of the dataset's job.

A task directory or a directory of them, a Harbor `dataset.toml` directory, a Python-task dataset, a rows
file, `NAME@VERSION` (fetched into the cache once, from `registry_path`, `registry_url` or Harbor's
registry), loaded `Task`s or a `TaskSet`, a list of task paths, Python tasks or their dict rows, repository
rows.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from evsys.engine import JobConfig, plan_trials
from evsys.engine.episodes import ServedTask, TaskCatalog
from evsys.engine.sources import TaskSource, resolve_tasks
from evsys.rollouts import prepare_tasks, save_tasks
from evsys.util.atomic import write_text_atomic

Tasks = Any
"""What `evsys run` takes (evsys.engine.sources): a path, `NAME@VERSION`, loaded tasks, Python tasks, rows."""


async def plan_catalog(
    tasks: Tasks,
    job: JobConfig,
    *,
    registry_path: Path | str | None = None,
    registry_url: str | None = None,
) -> TaskCatalog:
    """`tasks` resolved as `evsys run` resolves them and planned once as `job`'s trials; `TaskSourceError`
    (a ValueError) says what could not be found."""
    source = await resolve_tasks(tasks, registry_path=registry_path, registry_url=registry_url)
    return await asyncio.to_thread(catalog_of, source, job)


def catalog_of(source: TaskSource, job: JobConfig) -> TaskCatalog:
    """The catalog of a resolved source. Tasks in memory are saved under the job directory first
    (`tasks/tasks.jsonl` or `tasks/rows.jsonl`), so the job records what it ran."""
    if source.paths:
        datasets = [path.resolve() for path in source.paths]
        return TaskCatalog.load(datasets[0], job.model_copy(update={"datasets": datasets}))
    if source.rows and source.memory:
        raise ValueError("tasks: give repository rows or Python tasks, not a mix")
    root = job.job_dir / "tasks"
    if source.rows:
        data = "".join(row.model_dump_json(exclude_none=True) + "\n" for row in source.rows)
        write_text_atomic(root / "rows.jsonl", data)
        return TaskCatalog.load(
            root / "rows.jsonl", job.model_copy(update={"datasets": [root / "rows.jsonl"]})
        )
    items = prepare_tasks(source.memory, outcome_reward=True, sandbox=True)
    dataset = save_tasks(items, root)
    planned = plan_trials(job.model_copy(update={"datasets": [dataset]}), python_tasks=items)
    served = [ServedTask(p.config.task_name, p.task, p.spec) for p in planned if p.task is not None]
    return TaskCatalog(served, job.model_copy(update={"datasets": [dataset]}))
