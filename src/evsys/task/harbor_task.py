"""What Harbor (0.26) requires of a task directory, for `evsys tasks check`'s warnings.

Harbor loads a dataset directory by keeping the subdirectories its `Task.is_valid_dir` accepts and silently
skipping the others. It skips a directory without `task.toml`, one whose `[task] name` is not `org/name`
(`^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$`, no `..`; a task.toml without a `[task]` table is
named after its directory), and one without an `environment/` directory unless `[environment] docker_image`
is set. A task it loads whose `environment/` holds neither `Dockerfile` nor `docker-compose.yaml` (and which
sets no `docker_image`) fails to start under Harbor's Docker environment. evsys runs all of these; these
warnings say what a Harbor user of the same directory would meet.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from evsys.task.harbor_dataset import ORG_NAME
from evsys.task.models import Problem

HARBOR_SKIPS = "Harbor skips this task"
HARBOR_DEFINITIONS = ("Dockerfile", "docker-compose.yaml")


def harbor_problems(task_dir: Path) -> list[Problem]:
    """Warnings for what makes Harbor skip `task_dir` or fail to start it, each naming the key or the file."""
    toml = task_dir / "task.toml"
    if not toml.is_file():
        return [_warning("task.toml", None, f"missing: {HARBOR_SKIPS} (it loads directories with task.toml)")]
    try:
        data = tomllib.loads(toml.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return []  # evsys's own check reports the file
    return _name_problems(data.get("task"), task_dir.name) + _environment_problems(
        task_dir, data.get("environment")
    )


def _name_problems(table: Any, directory: str) -> list[Problem]:
    """`[task] name` is absent with the table, or not `org/name`."""
    if not isinstance(table, dict):
        return []  # no [task] table: Harbor names the task after its directory
    name = table.get("name")
    if name is None:
        return [_warning("task.toml", "task.name", f"missing in [task]: {HARBOR_SKIPS} (it needs org/name)")]
    if isinstance(name, str) and ORG_NAME.match(name) and ".." not in name:
        return []
    renamed = f"e.g. 'myorg/{directory}'; renamed, evsys still selects it by its short name"
    return [_warning("task.toml", "task.name", f"{name!r} is not org/name: {HARBOR_SKIPS} ({renamed})")]


def _environment_problems(task_dir: Path, table: Any) -> list[Problem]:
    """No `environment/` (nor `docker_image`), or one Harbor's Docker environment cannot start."""
    if isinstance(table, dict) and table.get("docker_image"):
        return []
    env_dir = task_dir / "environment"
    if not env_dir.is_dir():
        return [
            _warning(
                "environment/",
                None,
                f"missing: {HARBOR_SKIPS} (it needs environment/ or [environment] docker_image)",
            )
        ]
    if any((env_dir / name).is_file() for name in HARBOR_DEFINITIONS):
        return []
    return [
        _warning(
            "environment/Dockerfile",
            None,
            "missing: Harbor's Docker environment cannot start this task (it needs environment/Dockerfile, "
            "environment/docker-compose.yaml or [environment] docker_image)",
        )
    ]


def _warning(file: str, field: str | None, message: str) -> Problem:
    return Problem(file=file, field=field, message=message, severity="warning")
