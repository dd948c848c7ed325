"""SWE-bench-family rows: the `RepoTask` record and its loaders (JSONL, Parquet, a saved HF `datasets` dir).

A row names a repository (`repo`: `owner/name` on GitHub, a URL, or a local path; `repo_url` overrides where
it is fetched from), the commit the agent starts at (`base_commit`), the gold `patch`, the `test_patch`
applied only at verification, and the tests that decide the reward (`FAIL_TO_PASS`, `PASS_TO_PASS`: lists, or
JSON strings of lists as SWE-bench publishes them). The environment is the row's image (`image_name`, as
SWE-bench and SWE-smith publish per instance) or a small spec (`python`, `packages`, `install`, `test_cmd`).
`load_repo_rows` returns the valid rows and one `RowError` per bad row (row number and field), so one bad row
never hides the others.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

REPO_SUFFIXES = (".jsonl", ".parquet")
DEFAULT_TEST_CMD = "python -m pytest -rA -v -p no:cacheprovider"
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


class RepoTask(BaseModel):
    """One repository task: a SWE-bench / SWE-bench Verified / SWE-Gym / SWE-smith row."""

    model_config = {"extra": "ignore"}

    instance_id: str
    repo: str = Field(description="`owner/name` (GitHub), a git URL, or a local repository path.")
    base_commit: str
    patch: str = Field("", description="The gold patch (the oracle applies it).")
    test_patch: str = Field("", description="Applied at verification, after the agent stopped.")
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    problem_statement: str
    hints_text: str = ""
    version: str | None = None
    environment_setup_commit: str | None = None
    created_at: str | None = None
    repo_url: str | None = Field(None, description="Where to fetch `repo` from, when not GitHub.")
    image_name: str | None = Field(None, description="A prebuilt per-instance image holding /testbed.")
    python: str = Field("3.11", description="Python version of a spec-built environment.")
    packages: list[str] = Field(default_factory=list, description="pip requirements baked into the image.")
    install: list[str] = Field(
        default_factory=list, description="Commands run in the checkout before the agent (as root)."
    )
    test_cmd: str = Field(DEFAULT_TEST_CMD, description="Test ids are appended to it.")
    workdir: str = "/testbed"
    agent_network: Literal["no-network", "public"] = Field(
        "no-network",
        description="The agent's network (the install commands and the tests run with the public network). "
        "Off by default: with it an agent could fetch the upstream fix.",
    )
    test_chunk_size: int = Field(200, ge=1, description="Test ids per test command run.")

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", "packages", "install", mode="before")
    @classmethod
    def _json_list(cls, value: Any) -> Any:
        """SWE-bench stores test lists as JSON strings; accept both forms."""
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else []
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON list of strings: {exc.msg} at char {exc.pos}") from None
        if hasattr(value, "tolist"):  # numpy arrays from Parquet
            value = value.tolist()
        return value

    @field_validator("instance_id")
    @classmethod
    def _usable_id(cls, value: str) -> str:
        if not _ID.match(value) or ".." in value:
            raise ValueError(f"'{value}' is not a usable id (letters, digits, '._+-', no '..')")
        return value

    @field_validator("base_commit")
    @classmethod
    def _commit(cls, value: str) -> str:
        if not re.fullmatch(r"[0-9a-fA-F]{7,40}", value.strip()):
            raise ValueError(f"'{value}' is not a commit id (7 to 40 hex digits)")
        return value.strip()

    @property
    def source(self) -> str:
        """Where the repository is fetched from: `repo_url`, a local path, a URL, or GitHub's `owner/name`."""
        if self.repo_url:
            return self.repo_url
        if "://" in self.repo or self.repo.startswith(("/", "./", "../", "git@")) or Path(self.repo).exists():
            return self.repo
        return f"https://github.com/{self.repo}.git"

    @property
    def tests(self) -> list[str]:
        """Every listed test id, FAIL_TO_PASS first, without duplicates."""
        return list(dict.fromkeys([*self.FAIL_TO_PASS, *self.PASS_TO_PASS]))


class RowError(BaseModel):
    """A row that cannot be used: its number (1-based), its instance id when known, the field and why."""

    file: str
    row: int
    instance_id: str | None = None
    field: str | None = None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: row {self.row}"
        if self.instance_id:
            where += f" ({self.instance_id})"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class RepoRowSet(BaseModel):
    """The outcome of loading rows: valid tasks in file order, and one error per bad row."""

    path: Path
    tasks: list[RepoTask] = Field(default_factory=list)
    errors: list[RowError] = Field(default_factory=list)


MAX_LISTED_ERRORS = 5


class RepoRowsError(ValueError):
    """The rows file itself cannot be read (missing, wrong format, or the optional extra is absent)."""


def is_repo_dataset(path: Path | str) -> bool:
    """True for a `.jsonl`/`.parquet` rows file, or a directory saved by `datasets.Dataset.save_to_disk`."""
    path = Path(path)
    if path.is_file():
        return path.suffix in REPO_SUFFIXES
    return path.is_dir() and (path / "dataset_info.json").is_file() and (path / "state.json").is_file()


def _jsonl_rows(path: Path) -> list[tuple[int, Any]]:
    rows: list[tuple[int, Any]] = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rows.append((number, json.loads(line)))
            except json.JSONDecodeError as exc:
                rows.append((number, ValueError(f"invalid JSON: {exc.msg} at column {exc.colno}")))
    return rows


def _parquet_rows(path: Path) -> list[tuple[int, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise RepoRowsError(f"{path}: reading Parquet needs pyarrow (pip install 'evsys[repo]')") from None
    return list(enumerate(pq.read_table(path).to_pylist(), start=1))


def _hf_rows(path: Path) -> list[tuple[int, Any]]:
    try:
        import datasets
    except ImportError:
        raise RepoRowsError(
            f"{path}: a saved Hugging Face dataset needs the `datasets` package (pip install 'evsys[repo]')"
        ) from None
    data = datasets.load_from_disk(str(path))
    if isinstance(data, datasets.DatasetDict):
        raise RepoRowsError(f"{path}: a DatasetDict; give one split's directory ({', '.join(data)})")
    return list(enumerate(data.to_list(), start=1))


def read_rows(path: Path | str) -> list[tuple[int, Any]]:
    """The raw rows of a rows file with their 1-based numbers (JSONL line numbers)."""
    path = Path(path)
    if not path.exists():
        raise RepoRowsError(f"{path}: no such file or directory")
    if path.is_dir():
        return _hf_rows(path)
    if path.suffix == ".parquet":
        return _parquet_rows(path)
    if path.suffix == ".jsonl":
        return _jsonl_rows(path)
    raise RepoRowsError(f"{path}: not a rows file (.jsonl, .parquet, or a saved Hugging Face dataset)")


def _row_errors(file: str, number: int, raw: Any, exc: ValidationError) -> list[RowError]:
    instance = raw.get("instance_id") if isinstance(raw, dict) else None
    errors = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or None
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            message = "missing (required)"
        errors.append(
            RowError(
                file=file,
                row=number,
                instance_id=instance if isinstance(instance, str) else None,
                field=field,
                message=message,
            )
        )
    return errors


def load_repo_rows(path: Path | str) -> RepoRowSet:
    """Load rows: every valid `RepoTask` in file order, and the errors of the others (row + field)."""
    path = Path(path)
    result = RepoRowSet(path=path)
    seen: dict[str, int] = {}
    for number, raw in read_rows(path):
        if isinstance(raw, Exception) or not isinstance(raw, dict):
            message = str(raw) if isinstance(raw, Exception) else "not a JSON object"
            result.errors.append(RowError(file=path.name, row=number, message=message))
            continue
        try:
            task = RepoTask.model_validate(raw)
        except ValidationError as exc:
            merged = _row_errors(path.name, number, raw, exc)
            message = "; ".join(f"{e.field}: {e.message}" if e.field else e.message for e in merged)
            first = merged[0]
            result.errors.append(first.model_copy(update={"field": None, "message": message}))
            continue
        if task.instance_id in seen:
            result.errors.append(
                RowError(
                    file=path.name,
                    row=number,
                    instance_id=task.instance_id,
                    field="instance_id",
                    message=f"also used by row {seen[task.instance_id]}",
                )
            )
            continue
        if not task.FAIL_TO_PASS:
            result.errors.append(
                RowError(
                    file=path.name,
                    row=number,
                    instance_id=task.instance_id,
                    field="FAIL_TO_PASS",
                    message="is empty (the reward needs at least one test that must start passing)",
                )
            )
            continue
        seen[task.instance_id] = number
        result.tasks.append(task)
    return result


class SkippedRowsWarning(UserWarning):
    """`load_repo_tasks` left out bad rows (`load_repo_rows(path).errors` lists them with row and field)."""


def load_repo_tasks(path: Path | str, *, strict: bool = False) -> list[RepoTask]:
    """The valid rows of a rows file. Bad rows are never dropped silently: with `strict` any bad row raises
    `RepoRowsError` listing them, otherwise they are named in a `SkippedRowsWarning`; every row bad always
    raises."""
    rows = load_repo_rows(path)
    if rows.errors and (strict or not rows.tasks):
        raise RepoRowsError("\n".join(str(e) for e in rows.errors))
    if rows.errors:
        listed = "; ".join(str(e) for e in rows.errors[:MAX_LISTED_ERRORS])
        more = len(rows.errors) - MAX_LISTED_ERRORS
        warnings.warn(
            f"{len(rows.errors)} invalid row(s) of {path} left out: {listed}"
            + (f"; and {more} more" if more > 0 else ""),
            SkippedRowsWarning,
            stacklevel=2,
        )
    return rows.tasks
