"""Harbor dataset directories: a `dataset.toml` manifest beside the task directories it lists.

Harbor publishes a dataset as a directory holding `dataset.toml` (`[dataset]` with an `org/name`, version,
description; one `[[tasks]]` entry per task with its `org/name` and content digest; optional `[[files]]`)
and the task directories, each naming itself in its `task.toml` (`[task] name = "org/name"`). evsys's own
Python-task manifest has the same file name and a `[dataset] data = ...` key; `manifest_kind` tells the two
apart by content.

A Harbor manifest's task list decides which directories run, in its order; a listed task with no directory
here is reported as one invalid task (the others still run). Digests are recorded, not checked: they pin
published packages, and a local directory is what the user edits (datasets fetched by name are pinned by git
commit).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MANIFEST_NAME = "dataset.toml"
ORG_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
ManifestKind = Literal["python", "harbor"]
PYTHON_MANIFEST_KEYS = {
    "data",
    "verifier_module",
    "verifier",
    "system_prompt",
    "sandbox",
    "tools",
    "split",
    "columns",
}
"""Keys only evsys's Python-task manifest has in its `[dataset]` table."""


class DatasetManifestError(ValueError):
    """A `dataset.toml` that is neither form, or a Harbor manifest with an invalid field."""


class HarborDatasetInfo(BaseModel):
    """The `[dataset]` table of a Harbor manifest."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(description="The dataset's name, `org/name`.")
    version: str | None = None
    description: str = ""
    keywords: list[str] = Field(default_factory=list)


class HarborTaskRef(BaseModel):
    """One `[[tasks]]` entry: the task's `org/name` and the digest of its published package."""

    model_config = ConfigDict(extra="allow")

    name: str
    digest: str = ""

    @property
    def short_name(self) -> str:
        """The name without its organisation."""
        return self.name.rsplit("/", 1)[-1]


class HarborDatasetManifest(BaseModel):
    """A Harbor `dataset.toml`: the dataset's identity, its task list and free-form metadata."""

    model_config = ConfigDict(extra="allow")

    schema_version: str = "1.0"
    dataset: HarborDatasetInfo
    metadata: dict[str, Any] = Field(default_factory=dict)
    tasks: list[HarborTaskRef] = Field(default_factory=list)

    @property
    def label(self) -> str:
        """`org/name@version` (or `org/name` without a version)."""
        version = self.dataset.version
        return f"{self.dataset.name}@{version}" if version else self.dataset.name


def _read_toml(file: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(file.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise DatasetManifestError(f"{file}: invalid TOML: {exc}") from None


def manifest_kind(directory: Path | str) -> ManifestKind | None:
    """Which manifest `directory/dataset.toml` is (None when there is none): evsys's Python-task manifest has
    `[dataset] data` (or another key only it has), Harbor's names the dataset `org/name` or lists
    `[[tasks]]`. A file that is neither is a `DatasetManifestError` saying what each form needs; unreadable
    TOML counts as evsys's (its loader reports it)."""
    file = Path(directory) / MANIFEST_NAME
    if not file.is_file():
        return None
    try:
        raw = _read_toml(file)
    except DatasetManifestError:
        return "python"
    table = raw.get("dataset")
    table = table if isinstance(table, dict) else {}
    if table.keys() & PYTHON_MANIFEST_KEYS:
        return "python"
    name = table.get("name")
    if "tasks" in raw or (isinstance(name, str) and ORG_NAME.match(name)):
        return "harbor"
    raise DatasetManifestError(
        f"{file}: not a dataset manifest evsys knows: an evsys Python-task manifest needs `[dataset] data = "
        '"<rows file>"` (docs/rl.md); a Harbor dataset manifest needs `[dataset] name = "org/name"` and '
        '`[[tasks]] name = "org/task"` entries beside the task directories (docs/tasks.md)'
    )


def is_harbor_dataset(directory: Path | str) -> bool:
    """True when `directory` holds a Harbor `dataset.toml` (raises for a manifest of neither form)."""
    return manifest_kind(directory) == "harbor"


def read_harbor_manifest(directory: Path | str) -> HarborDatasetManifest:
    """Parse `directory/dataset.toml` as a Harbor manifest; errors name the file and the field."""
    file = Path(directory) / MANIFEST_NAME
    try:
        manifest = HarborDatasetManifest.model_validate(_read_toml(file))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise DatasetManifestError(f"{file}: {problems}") from None
    bad = [ref.name for ref in manifest.tasks if not ORG_NAME.match(ref.name)]
    if bad:
        raise DatasetManifestError(f"{file}: tasks.name: '{bad[0]}' is not in `org/name` form")
    return manifest


def declared_task_name(task_dir: Path) -> str | None:
    """The `[task] name` a task directory's `task.toml` declares (None if none or unreadable)."""
    try:
        raw = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    table = raw.get("task")
    name = table.get("name") if isinstance(table, dict) else None
    return name if isinstance(name, str) else None


def listed_task_dirs(
    directory: Path, manifest: HarborDatasetManifest, candidates: list[Path]
) -> tuple[list[Path], list[HarborTaskRef]]:
    """The task directories the manifest lists, in its order, and the listed tasks with no directory here. A
    directory matches by its `[task] name`, else by its directory name equal to the task's short name. An
    empty task list means every task directory."""
    if not manifest.tasks:
        return candidates, []
    by_name: dict[str, Path] = {}
    for candidate in candidates:
        declared = declared_task_name(candidate)
        if declared:
            by_name.setdefault(declared, candidate)
    found: list[Path] = []
    missing: list[HarborTaskRef] = []
    for ref in manifest.tasks:
        path = by_name.get(ref.name) or _by_directory_name(directory, ref)
        if path is None:
            missing.append(ref)
        elif path not in found:
            found.append(path)
    return found, missing


def _by_directory_name(directory: Path, ref: HarborTaskRef) -> Path | None:
    candidate = directory / ref.short_name
    return candidate if candidate.is_dir() else None
