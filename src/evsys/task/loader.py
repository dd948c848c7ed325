"""Load Harbor-compatible task directories into `Task` records, collecting every problem with file and field.

A dataset is a directory of task directories, or one task directory (it has `task.toml` or `instruction.md`).
A Harbor dataset directory's `dataset.toml` decides which of its task directories run
(evsys.task.harbor_dataset).
`load_tasks` returns the valid tasks and one `TaskLoadError` per invalid directory, so one bad task never
hides the others; `load_task` raises `TaskLoadError` for one directory. `load_task_cached` keeps what it
loaded per directory while none of the directory's files changed: a worker that runs many trials of one task
(the attempts of a group rollout) parses it once.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from pathlib import Path

from pydantic import BaseModel, Field

from evsys.task.config import parse_task_toml
from evsys.task.dockerfile import resolve_environment
from evsys.task.harbor_dataset import (
    MANIFEST_NAME,
    HarborDatasetManifest,
    HarborTaskRef,
    is_harbor_dataset,
    listed_task_dirs,
    read_harbor_manifest,
)
from evsys.task.hostbase import host_mismatch
from evsys.task.models import Problem, ResolvedEnvironment, Severity, Task, TaskConfig
from evsys.task.select import TaskNameError, resolve_task_name
from evsys.task.steps import load_steps

TASK_MARKERS = ("task.toml", "instruction.md")
CACHED_TASKS = 512  # task directories `load_task_cached` keeps
_BAD_NAME = re.compile(r"[\s\x00-\x1f\\]|\.\.|^[./]")


class TaskLoadError(Exception):
    """A task directory that cannot be used; `str()` lists its problems as `file:field: message` lines."""

    def __init__(self, task_name: str, path: Path, problems: list[Problem]) -> None:
        self.task_name = task_name
        self.path = Path(path)
        self.problems = list(problems)
        super().__init__(str(self))

    @property
    def errors(self) -> list[Problem]:
        """The problems with severity "error"."""
        return [p for p in self.problems if p.severity == "error"]

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.errors) or f"{self.task_name}: invalid task"

    def __reduce__(self) -> tuple[type[TaskLoadError], tuple[str, Path, list[Problem]]]:
        # keep pickling (multiprocessing, ray) working
        return (TaskLoadError, (self.task_name, self.path, self.problems))


class DatasetNotFoundError(FileNotFoundError):
    """The dataset path does not exist or holds no task directory."""


class TaskSet(BaseModel):
    """The outcome of loading a dataset: the valid tasks (sorted by name) and one error per invalid task."""

    model_config = {"arbitrary_types_allowed": True}

    path: Path
    tasks: list[Task] = Field(default_factory=list)
    errors: list[TaskLoadError] = Field(default_factory=list)
    manifest: HarborDatasetManifest | None = Field(
        None, description="The Harbor dataset manifest the directory carries, if any."
    )

    def __len__(self) -> int:
        return len(self.tasks)

    def by_name(self, name: str) -> Task:
        """The task called `name` (its full name, or its short name when no other task has it); KeyError
        saying why when there is none, or several."""
        try:
            name = resolve_task_name(name, [task.name for task in self.tasks])
        except TaskNameError as exc:
            raise KeyError(str(exc)) from None
        return next(task for task in self.tasks if task.name == name)


def is_task_dir(path: Path) -> bool:
    """True when `path` is a task directory (has `task.toml` or `instruction.md`)."""
    return path.is_dir() and any((path / marker).is_file() for marker in TASK_MARKERS)


def _looks_like_task(path: Path) -> bool:
    """A dataset entry to load and report on: a task directory, or one with task-shaped subfolders."""
    if path.name.startswith((".", "_")) or not path.is_dir():
        return False
    return is_task_dir(path) or (path / "tests").is_dir() or (path / "environment").is_dir()


def _read_instruction(task_dir: Path, problems: list[Problem]) -> str:
    path = task_dir / "instruction.md"
    if not path.is_file():
        problems.append(Problem(file="instruction.md", message="missing (it holds what the agent is told)"))
        return ""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(Problem(file="instruction.md", message=f"cannot be read: {exc}"))
        return ""
    if not text.strip():
        problems.append(Problem(file="instruction.md", message="is empty"))
    return text


CRLF_NOTE = (
    "has Windows (CRLF) line endings, so bash reads '\\r' into every command and the script fails; convert "
    "it: sed -i 's/\\r$//' FILE"
)


def _check_scripts(task_dir: Path, problems: list[Problem], *, require_solution: bool) -> None:
    for script in ("tests/test.sh", "solution/solve.sh"):
        path = task_dir / script
        if path.is_file() and b"\r\n" in path.read_bytes():
            problems.append(Problem(file=script, message=CRLF_NOTE.replace("FILE", script)))
    if not (task_dir / "tests" / "test.sh").is_file():
        problems.append(
            Problem(file="tests/test.sh", message="missing (the verifier runs it to write the reward)")
        )
    if not (task_dir / "solution" / "solve.sh").is_file():
        severity: Severity = "error" if require_solution else "warning"
        problems.append(
            Problem(
                file="solution/solve.sh",
                message="missing: the oracle agent needs it (its trials fail as task_invalid)",
                severity=severity,
            )
        )


IMAGE_NOTE = "evsys builds or pulls the image; --skip-build runs the task on the host rootfs instead"


def _image_problems(config: TaskConfig, env: ResolvedEnvironment) -> list[Problem]:
    """Warnings for environments that run on a built or pulled image (or the host rootfs with
    `--skip-build`)."""
    image = config.environment.docker_image
    if image:
        env.base_image = image
    mismatch = host_mismatch(image) if image else None
    if mismatch is not None:
        env.needs_image = True
        env.image_reasons.append(
            f"task.toml:environment.docker_image: image '{image}' is pulled at run time ({mismatch})"
        )
        env.base_reason = env.image_reasons[-1]
    problems = []
    for reason in env.image_reasons:
        if reason == env.base_reason:  # a base the host does not provide: how evsys runs it, not a problem
            continue
        where, _, message = reason.partition(": ")
        file, _, field = where.partition(":")
        problems.append(
            Problem(
                file=file,
                field=field or None,
                message=f"{message} ({IMAGE_NOTE})",
                severity="warning",
            )
        )
    return problems


def _task_name(resolved_dir: Path, config: TaskConfig | None, problems: list[Problem]) -> str:
    name = (config.task.name if config else None) or resolved_dir.name
    if config and config.task.name is not None and (not name.strip() or _BAD_NAME.search(name)):
        problems.append(
            Problem(
                file="task.toml",
                field="task.name",
                message=f"'{name}' is not a usable name (no spaces, '..', '\\')",
            )
        )
    return name


def load_task(task_dir: Path | str, *, require_solution: bool = False) -> Task:
    """Load one task directory; raise `TaskLoadError` listing every error (warnings are kept on the Task)."""
    task_dir = Path(task_dir)
    if not task_dir.is_dir():
        raise TaskLoadError(
            task_dir.name, task_dir, [Problem(file=str(task_dir), message="is not a directory")]
        )
    problems: list[Problem] = []
    config = parse_task_toml(task_dir / "task.toml", problems)
    steps = load_steps(task_dir, config.steps, problems) if config is not None and config.steps else []
    if config is not None and config.steps:  # each step has its instruction and test script
        instruction = ""
    else:
        instruction = _read_instruction(task_dir, problems)
        _check_scripts(task_dir, problems, require_solution=require_solution)
    env, env_problems = resolve_environment(task_dir)
    problems += env_problems
    resolved = task_dir.resolve()
    name = _task_name(resolved, config, problems)
    if config is not None:
        problems += _image_problems(config, env)
    if any(p.severity == "error" for p in problems) or config is None:
        raise TaskLoadError(name, task_dir, problems)
    env.workdir = config.environment.workdir or env.workdir
    env.env = {**env.env, **config.environment.env}
    return Task(
        name=name,
        path=resolved,
        instruction=instruction,
        config=config,
        environment=env,
        tests_dir=_resolved_child(resolved, "tests"),
        solution_dir=_resolved_child(resolved, "solution") if (resolved / "solution").is_dir() else None,
        steps=steps,
        warnings=[str(p) for p in problems if p.severity == "warning"],
    )


def _resolved_child(resolved_dir: Path, name: str) -> Path:
    """`resolved_dir / name` resolved: a symlink is followed; a plain entry needs no second walk."""
    child = resolved_dir / name
    return child.resolve() if child.is_symlink() else child


TreeSignature = tuple[tuple[str, int, int, int], ...]  # (path, mtime ns, size, inode) of each entry
_CACHE: OrderedDict[str, tuple[TreeSignature, Task]] = OrderedDict()
_CACHE_LOCK = threading.Lock()  # trials load their tasks from worker threads


def load_task_cached(task_dir: Path | str) -> Task:
    """`load_task`, answered from memory while no file of the directory changed (each file's mtime, size and
    inode, found by one walk); the `Task` is shared by the trials that ask, so it is only ever read."""
    path = os.path.abspath(task_dir)
    try:
        signature = _tree_signature(path)
    except OSError:  # gone or unreadable: load_task says what is wrong
        return load_task(task_dir)
    with _CACHE_LOCK:
        hit = _CACHE.get(path)
        if hit is not None and hit[0] == signature:
            _CACHE.move_to_end(path)
            return hit[1]
    task = load_task(task_dir)
    with _CACHE_LOCK:
        _CACHE[path] = (signature, task)
        _CACHE.move_to_end(path)
        while len(_CACHE) > CACHED_TASKS:
            _CACHE.popitem(last=False)
    return task


def _tree_signature(path: str) -> TreeSignature:
    """What changes when a file under `path` changes: each entry's name, mtime, size and inode (of what a
    symlink names, when it names something; linked directories are walked too, each real one once)."""
    entries = []
    seen = {os.path.realpath(path)}
    for root, dirs, files in os.walk(path, followlinks=True):
        dirs.sort()
        for name in list(dirs):
            real = os.path.realpath(os.path.join(root, name))
            if real in seen:  # a link loop, or a directory already walked under another name
                dirs.remove(name)
            seen.add(real)
        for name in sorted(files) + dirs:
            entry = os.path.join(root, name)
            try:
                st = os.stat(entry)
            except OSError:  # a dangling link
                st = os.lstat(entry)
            entries.append((entry, st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(entries)


def task_dirs(path: Path | str) -> list[Path]:
    """The task directories of a dataset path; raises `DatasetNotFoundError` if there is none."""
    path = Path(path)
    if not path.exists():
        raise DatasetNotFoundError(f"dataset path '{path}' does not exist")
    if not path.is_dir():
        raise DatasetNotFoundError(f"dataset path '{path}' is not a directory")
    if is_task_dir(path):
        return [path]
    found = sorted(p for p in path.iterdir() if _looks_like_task(p))
    if not found:
        raise DatasetNotFoundError(
            f"no task directories in '{path}' (a task directory holds task.toml or instruction.md)"
        )
    return found


def _missing_task(directory: Path, ref: HarborTaskRef) -> TaskLoadError:
    problem = Problem(
        file=MANIFEST_NAME,
        field="tasks",
        message=f"lists '{ref.name}' but no task directory here declares it (task.toml `[task] name`) "
        f"or is called '{ref.short_name}'",
    )
    return TaskLoadError(ref.short_name, directory / ref.short_name, [problem])


def manifest_task_dirs(
    path: Path | str,
) -> tuple[list[Path], list[TaskLoadError], HarborDatasetManifest | None]:
    """The task directories that run from `path` (those a Harbor `dataset.toml` lists, else all), one error
    per listed task with no directory here, and the manifest (None without one)."""
    dirs = task_dirs(path)
    if not is_harbor_dataset(path):
        return dirs, [], None
    manifest = read_harbor_manifest(path)
    dirs, missing = listed_task_dirs(Path(path), manifest, dirs)
    return dirs, [_missing_task(Path(path), ref) for ref in missing], manifest


def load_tasks(path: Path | str, *, require_solution: bool = False) -> TaskSet:
    """Load a dataset: every valid task (sorted by name) plus one `TaskLoadError` per invalid directory; a
    Harbor dataset manifest's task list decides which directories load."""
    result = TaskSet(path=Path(path))
    dirs, missing, result.manifest = manifest_task_dirs(path)
    result.errors += missing
    seen: dict[str, Path] = {}
    for task_dir in dirs:
        try:
            task = load_task(task_dir, require_solution=require_solution)
        except TaskLoadError as exc:
            result.errors.append(exc)
            continue
        if task.name in seen:
            problem = Problem(
                file="task.toml",
                field="task.name",
                message=f"name '{task.name}' is also used by {seen[task.name]}",
            )
            result.errors.append(TaskLoadError(task.name, task_dir, [problem]))
            continue
        seen[task.name] = task_dir
        result.tasks.append(task)
    result.tasks.sort(key=lambda t: t.name)
    return result
