"""Python tasks: a prompt plus a verifier function (`VerifiedTask`) or a prompt alone (`PromptTask`).

`load_python_tasks(source)` reads them from a JSONL file, a Parquet file, a local Hugging Face `datasets`
directory (written with `save_to_disk`), a directory holding a `dataset.toml`, or an iterable of dict rows.

Column mapping (full table in docs/rl.md; rename columns with `columns={"prompt": "question"}`): `id`
(default `<file stem>-<position>`, unique), `prompt` (required), `verifier` (rows without one are
`PromptTask`s), `data` (an object or a JSON-object string), `system_prompt`, `sandbox`, `tools`,
`verifier_timeout_sec` (default `PYTHON_VERIFIER_TIMEOUT_SEC`); any other column is merged into `data`.

Nulls (Parquet/`datasets` fill missing values with them) count as absent. Either every row has a verifier
or none does: a mix is almost always a mistake and is reported. Errors name the file, the row (for JSONL: the
line number; otherwise the 1-based record number) and the field, and every bad row is reported at once.

`dataset.toml` (see docs/rl.md) names the data file, a module to import so its `@verifier` functions register,
and defaults. A data file whose directory has a `dataset.toml` naming it picks that configuration up too.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticSerializationError, to_json

from evsys.task.harbor_dataset import manifest_kind
from evsys.task.loader import DatasetNotFoundError
from evsys.task.models import McpServerConfig
from evsys.task.turns import Interaction, as_reference, check_tools
from evsys.util.imports import import_module_or_file

RESERVED_DATA_FIELDS = ("completion", "trajectory", "task", "rewards", "prompt")
"""Names a data field may not use: they are the verifier's own arguments."""

TASK_FIELDS = (
    "id",
    "prompt",
    "verifier",
    "data",
    "system_prompt",
    "sandbox",
    "tools",
    "verifier_timeout_sec",
    "respond",
    "max_turns",
    "mcp_servers",
)
PYTHON_VERIFIER_TIMEOUT_SEC = 120.0
"""A Python task's verifier (function, rubric, LLM judge) gets this long unless the task, its dataset.toml
or `run_rollouts(verifier_timeout_sec=)` says otherwise; past it the trial is `verifier_timeout`."""
DATASET_TOML = "dataset.toml"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _tool_reference(value: Any) -> Any:
    return as_reference(value, "custom tool")


def _respond_reference(value: Any) -> Any:
    return as_reference(value, "respond hook")


class _PythonTaskBase(BaseModel):
    """Fields shared by both kinds of Python task."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=200)
    prompt: str
    system_prompt: str | None = None
    sandbox: bool = Field(False, description="Start a sandbox for the agent (agentic task); none otherwise.")
    tools: list[Annotated[str, BeforeValidator(_tool_reference)]] | None = Field(
        None,
        description="What the model is offered in place of every built-in tool: built-in names, Python "
        "callables (custom tools, run host-side) and MCP tools; see evsys.task.turns.",
    )
    respond: Annotated[str | None, BeforeValidator(_respond_reference)] = Field(
        None, description="The environment's reply to each model turn without a tool call (evsys.task.turns)."
    )
    max_turns: int | None = Field(
        None, ge=1, description="Model turns of a multi-turn task; None: the agent's limit."
    )
    mcp_servers: list[McpServerConfig] = Field(
        default_factory=list, description="MCP servers offered to the agent (needs sandbox=True)."
    )
    data: dict[str, Any] = Field(default_factory=dict)
    verifier_timeout_sec: float | None = Field(
        None, gt=0, description="Limit for the verifier; None: PYTHON_VERIFIER_TIMEOUT_SEC."
    )

    @field_validator("id", "prompt")
    @classmethod
    def _text_fields(cls, value: str, info: Any) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        if info.field_name == "id" and _CONTROL.search(value):
            raise ValueError("must be printable text, without control characters")
        return value

    @field_validator("data")
    @classmethod
    def _data_names(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, item in value.items():
            if key in RESERVED_DATA_FIELDS:
                raise ValueError(f"field {key!r} is reserved for the verifier's own arguments; rename it")
            try:
                to_json(item)
            except PydanticSerializationError:
                raise ValueError(
                    f"field {key!r} holds a {type(item).__name__}, which is not JSON-serialisable"
                ) from None
        return value

    @model_validator(mode="after")
    def _known_tools(self) -> _PythonTaskBase:
        if self.mcp_servers and not self.sandbox:
            raise ValueError("mcp_servers need a sandbox: set sandbox=true or drop them")
        check_tools(self.tools or [], self.sandbox, [server.name for server in self.mcp_servers])
        return self

    @property
    def interaction(self) -> Interaction:
        """The task's tools, respond hook and turn limit, as the agent reads them."""
        return Interaction(tools=self.tools, respond=self.respond, max_turns=self.max_turns, data=self.data)


class VerifiedTask(_PythonTaskBase):
    """A prompt scored by a verifier function (registered name or `pkg.mod:fn` import path) over `data`."""

    kind: Literal["verified"] = "verified"
    verifier: str = Field(min_length=1)


class PromptTask(_PythonTaskBase):
    """A prompt for generation only: no verifier runs and the reward is 0."""

    kind: Literal["prompt"] = "prompt"


PythonTask = Annotated[VerifiedTask | PromptTask, Field(discriminator="kind")]


class RowProblem(BaseModel):
    """One thing wrong with one row of a task dataset."""

    file: str
    row: int | None = None
    field: str | None = None
    message: str

    def __str__(self) -> str:
        where = self.file + (f": row {self.row}" if self.row is not None else "")
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class PythonTaskLoadError(ValueError):
    """A dataset with bad rows; `problems` lists every one, `str()` shows them one per line."""

    def __init__(self, problems: list[RowProblem]) -> None:
        self.problems = list(problems)
        shown = [str(p) for p in self.problems[:20]]
        if len(self.problems) > 20:
            shown.append(f"... and {len(self.problems) - 20} more problems")
        super().__init__("\n".join(shown))


class PythonDatasetConfig(BaseModel):
    """The `[dataset]` table of a `dataset.toml`: the data file, the verifier module, defaults for rows."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    data: str = Field(description="The data file or datasets directory, relative to dataset.toml.")
    verifier_module: str | None = Field(None, description="A .py file (relative) or a dotted module.")
    verifier: str | None = Field(None, description="Default verifier for rows without a verifier column.")
    system_prompt: str | None = None
    sandbox: bool | None = None
    tools: list[str] | None = None
    verifier_timeout_sec: float | None = Field(None, gt=0, description="Default verifier limit for rows.")
    split: str | None = Field(None, description="Split of a saved DatasetDict.")
    columns: dict[str, str] = Field(default_factory=dict, description="evsys field -> column name.")


class _DatasetFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dataset: PythonDatasetConfig


def is_python_dataset(path: Path | str) -> bool:
    """True when `path` is a directory with evsys's own `dataset.toml` (not a Harbor dataset manifest):
    `evsys run <dir>` loads it as Python tasks. A `dataset.toml` of neither form raises
    `DatasetManifestError`."""
    return manifest_kind(path) == "python"


def read_dataset_config(path: Path | str) -> PythonDatasetConfig:
    """Parse a `dataset.toml` (or the one in directory `path`); errors name the file and the field."""
    file = Path(path)
    file = file / DATASET_TOML if file.is_dir() else file
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DatasetNotFoundError(f"{file}: no such file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        _fail(file, f"invalid TOML: {exc}")
    try:
        return _DatasetFile.model_validate(raw).dataset
    except ValidationError as exc:
        raise PythonTaskLoadError(_validation_problems(exc, str(file), None)) from None


def _validation_problems(exc: ValidationError, file: str, row: int | None) -> list[RowProblem]:
    return [
        RowProblem(file=file, row=row, field=".".join(map(str, err["loc"])) or None, message=err["msg"])
        for err in exc.errors()
    ]


def _fail(file: Path | str, message: str, field: str | None = None) -> NoReturn:
    """Raise a PythonTaskLoadError with one problem about the whole file."""
    raise PythonTaskLoadError([RowProblem(file=str(file), field=field, message=message)])


def _rl_import(module: str, what: str) -> Any:
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        raise ImportError(
            f"{what} needs the `{module.split('.')[0]}` package: pip install 'evsys[rl]'"
        ) from None


def _read_jsonl(path: Path) -> Iterable[tuple[int, Any]]:
    """(line number, row) for every non-blank line; bad JSON yields a RowProblem in place of the row."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        _fail(path, f"is not UTF-8 text ({exc.reason} at byte {exc.start})")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            yield number, RowProblem(file=str(path), row=number, message=f"invalid JSON: {exc.msg}")


def _read_parquet(path: Path) -> Iterable[tuple[int, Any]]:
    parquet = _rl_import("pyarrow.parquet", "reading Parquet")
    try:
        table = parquet.read_table(path)
    except Exception as exc:
        _fail(path, f"unreadable Parquet: {exc}")
    return enumerate(table.to_pylist(), start=1)


def _read_hf_dir(path: Path, split: str | None) -> Iterable[tuple[int, Any]]:
    datasets = _rl_import("datasets", "reading a saved datasets directory")
    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:
        _fail(path, f"unreadable datasets directory: {exc}")
    if isinstance(loaded, datasets.DatasetDict):
        splits = list(loaded.keys())
        if split is None and len(splits) != 1:
            _fail(path, f"holds splits {', '.join(splits)}; choose one with split=", "split")
        chosen = split or splits[0]
        if chosen not in loaded:
            _fail(path, f"no split {chosen!r}; available: {', '.join(splits)}", "split")
        loaded = loaded[chosen]
    return enumerate(loaded, start=1)


def _is_hf_dir(path: Path) -> bool:
    return any((path / name).is_file() for name in ("dataset_info.json", "state.json", "dataset_dict.json"))


def _read_source(path: Path, split: str | None) -> Iterable[tuple[int, Any]]:
    if path.is_dir():
        if _is_hf_dir(path):
            return _read_hf_dir(path, split)
        _fail(path, "is neither a saved datasets directory nor has a dataset.toml")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return _read_jsonl(path)
    if suffix in (".parquet", ".pq"):
        return _read_parquet(path)
    _fail(path, f"unsupported file type {suffix or '(none)'!r}; use .jsonl, .parquet or a datasets directory")


def _split_row(row: Mapping[str, Any], columns: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(task fields, extra columns) of one row, after renaming columns and dropping nulls of task fields."""
    column_of = {field: columns.get(field, field) for field in TASK_FIELDS}
    field_of = {column: field for field, column in column_of.items()}
    fields: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for column, value in row.items():
        field = field_of.get(str(column))
        if field is None:
            extra[str(column)] = value
        elif value is not None:
            fields[field] = value
    return fields, extra


def _build_data(fields: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """The row's data: its `data` column (object or JSON string) plus every extra column."""
    data = fields.pop("data", {})
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError:
            raise ValueError("a string data column must hold a JSON object") from None
    if not isinstance(data, Mapping):
        raise ValueError(f"must be an object, got {type(data).__name__}")
    data = {str(k): v for k, v in data.items()}
    for key, value in extra.items():
        if key in data:
            raise ValueError(f"column {key!r} clashes with the data field of the same name")
        data[key] = value
    return data


@dataclass(frozen=True)
class _Source:
    """Where rows come from (for messages and default ids) and how to read them."""

    file: str
    stem: str
    columns: Mapping[str, str]
    defaults: dict[str, Any]  # values a row gets when it lacks the column


def _row_task(
    row: Any, number: int, position: int, src: _Source
) -> VerifiedTask | PromptTask | list[RowProblem]:
    """One row as a task, or the problems that stop it from being one."""
    file, columns = src.file, src.columns
    if isinstance(row, RowProblem):
        return [row]
    if not isinstance(row, Mapping):
        return [RowProblem(file=file, row=number, message=f"must be an object, got {type(row).__name__}")]
    fields, extra = _split_row(row, columns)
    try:
        fields["data"] = _build_data(fields, extra)
    except ValueError as exc:
        return [RowProblem(file=file, row=number, field=columns.get("data", "data"), message=str(exc))]
    fields.setdefault("id", f"{src.stem}-{position}")
    if isinstance(fields["id"], int) and not isinstance(fields["id"], bool):
        fields["id"] = str(fields["id"])
    for name, value in src.defaults.items():
        if value is not None:
            fields.setdefault(name, value)
    model = VerifiedTask if "verifier" in fields else PromptTask
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        problems = _validation_problems(exc, file, number)
        for problem in problems:
            if problem.field:
                head, _, rest = problem.field.partition(".")
                problem.field = columns.get(head, head) + (f".{rest}" if rest else "")
        return problems


def _convert(rows: Iterable[tuple[int, Any]], src: _Source) -> list[VerifiedTask | PromptTask]:
    """Every row as a task; raises PythonTaskLoadError listing all problems when any row is bad."""
    tasks: list[VerifiedTask | PromptTask] = []
    numbers: list[int] = []
    problems: list[RowProblem] = []
    for position, (number, row) in enumerate(rows):
        result = _row_task(row, number, position, src)
        if isinstance(result, list):
            problems.extend(result)
        else:
            tasks.append(result)
            numbers.append(number)
    problems.extend(_consistency_problems(tasks, numbers, src.file, src.columns))
    if problems:
        raise PythonTaskLoadError(problems)
    return tasks


def _consistency_problems(
    tasks: list[Any], numbers: list[int], file: str, columns: Mapping[str, str]
) -> list[RowProblem]:
    """Duplicate ids, and a mix of rows with and without a verifier."""
    problems: list[RowProblem] = []
    first_row: dict[str, int] = {}
    for task, number in zip(tasks, numbers, strict=True):
        if task.id in first_row:
            message = f"duplicate id {task.id!r} (first used in row {first_row[task.id]})"
            problems.append(RowProblem(file=file, row=number, field=columns.get("id", "id"), message=message))
        first_row.setdefault(task.id, number)
    kinds = {task.kind for task in tasks}
    if len(kinds) > 1:
        number = next(n for t, n in zip(tasks, numbers, strict=True) if t.kind == "prompt")
        message = "has no verifier while other rows have one; give every row a verifier (or a default)"
        problems.append(
            RowProblem(file=file, row=number, field=columns.get("verifier", "verifier"), message=message)
        )
    return problems


def _sibling_config(path: Path) -> PythonDatasetConfig | None:
    """The dataset.toml next to a data file, when it names that file."""
    toml = path.parent / DATASET_TOML
    if path.is_dir() or manifest_kind(path.parent) != "python":
        return None
    config = read_dataset_config(toml)
    return config if (path.parent / config.data).resolve() == path.resolve() else None


def _apply_config(config: PythonDatasetConfig, base: Path) -> None:
    """Import the config's verifier module so its `@verifier` functions register."""
    if config.verifier_module:
        try:
            import_module_or_file(config.verifier_module, base_dir=base)
        except Exception as exc:
            message = f"cannot import {config.verifier_module!r}: {type(exc).__name__}: {exc}"
            _fail(base / DATASET_TOML, message, "dataset.verifier_module")


def load_python_tasks(
    source: str | Path | Iterable[Mapping[str, Any]],
    *,
    verifier: str | None = None,
    system_prompt: str | None = None,
    columns: Mapping[str, str] | None = None,
    split: str | None = None,
) -> list[VerifiedTask | PromptTask]:
    """Load Python tasks from a file, a directory, or dict rows (column mapping: module docstring).

    `verifier` and `system_prompt` are defaults for rows without those columns (they beat dataset.toml's);
    `columns` maps evsys field names to the dataset's column names; `split` picks a split of a DatasetDict.
    Raises `PythonTaskLoadError` listing every bad row, `DatasetNotFoundError` for a missing path.
    """
    if isinstance(source, str | Path):
        return _load_path(Path(source), verifier, system_prompt, columns, split)
    if isinstance(source, Mapping):
        _fail("<rows>", "expected an iterable of rows (dicts), got a single dict")
    records: Iterable[Mapping[str, Any]] = source
    if hasattr(source, "columns") and hasattr(source, "to_dict"):  # a pandas DataFrame
        records = source.to_dict(orient="records")
    rows = ((i, row) for i, row in enumerate(records, start=1))
    defaults = {"verifier": verifier, "system_prompt": system_prompt}
    return _convert(rows, _Source("<rows>", "item", dict(columns or {}), defaults))


def _load_path(
    path: Path,
    verifier: str | None,
    system_prompt: str | None,
    columns: Mapping[str, str] | None,
    split: str | None,
) -> list[VerifiedTask | PromptTask]:
    """Load from a path: a dataset.toml directory (or a file it names) applies its configuration first."""
    if not path.exists():
        raise DatasetNotFoundError(f"{path}: no such file or directory")
    config = read_dataset_config(path) if is_python_dataset(path) else _sibling_config(path)
    base = path if path.is_dir() else path.parent
    if config is not None:
        _apply_config(config, base)
        data_path = base / config.data
        if not data_path.exists():
            _fail(base / DATASET_TOML, f"{data_path} does not exist", "dataset.data")
        path = data_path
    defaults = {"verifier": verifier, "system_prompt": system_prompt}  # explicit arguments beat dataset.toml
    if config is not None:
        for name in ("verifier", "system_prompt", "sandbox", "tools", "verifier_timeout_sec"):
            defaults[name] = defaults.get(name) or getattr(config, name)
    merged_columns = {**(config.columns if config else {}), **dict(columns or {})}
    rows = _read_source(path, split or (config.split if config else None))
    return _convert(rows, _Source(str(path), path.stem, merged_columns, defaults))
