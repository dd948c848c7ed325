"""Task definitions and loading: Harbor-compatible task directories (`task.toml`, `instruction.md`, ...)."""

from evsys.task.config import parse_size_mb
from evsys.task.dockerfile import TRIVIAL_BASE_IMAGES, parse_dockerfile, resolve_environment
from evsys.task.loader import (
    DatasetNotFoundError,
    TaskLoadError,
    TaskSet,
    is_task_dir,
    load_task,
    load_tasks,
    task_dirs,
)
from evsys.task.models import CopyOptions, Problem, ResolvedEnvironment, Task, TaskConfig

__all__ = [
    "TRIVIAL_BASE_IMAGES",
    "CopyOptions",
    "DatasetNotFoundError",
    "Problem",
    "ResolvedEnvironment",
    "Task",
    "TaskConfig",
    "TaskLoadError",
    "TaskSet",
    "is_task_dir",
    "load_task",
    "load_tasks",
    "parse_dockerfile",
    "parse_size_mb",
    "resolve_environment",
    "task_dirs",
]
