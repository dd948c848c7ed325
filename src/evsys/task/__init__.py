"""Task definitions and loading: Harbor-compatible task directories (`task.toml`, `instruction.md`, ...)."""

from evsys.task.config import parse_size_mb
from evsys.task.dockerfile import parse_dockerfile, resolve_environment
from evsys.task.hostbase import HostFacts, base_needs, host_mismatch
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
    "CopyOptions",
    "DatasetNotFoundError",
    "HostFacts",
    "Problem",
    "ResolvedEnvironment",
    "Task",
    "TaskConfig",
    "TaskLoadError",
    "TaskSet",
    "base_needs",
    "host_mismatch",
    "is_task_dir",
    "load_task",
    "load_tasks",
    "parse_dockerfile",
    "parse_size_mb",
    "resolve_environment",
    "task_dirs",
]
