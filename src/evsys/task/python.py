"""Python tasks: a prompt plus a verifier function (`VerifiedTask`) or a prompt alone (`PromptTask`).

`load_python_tasks(source)` reads them from a JSONL file, a Parquet file, a local Hugging Face `datasets`
directory (written with `save_to_disk`), a directory holding a `dataset.toml`, or an iterable of dict rows.

Column mapping (full table in docs/rl.md; rename columns with `columns={"prompt": "question"}`): `id`
(default `<file stem>-<position>`, unique), `prompt` (required), `verifier` (rows without one are
`PromptTask`s), `data` (an object or a JSON-object string), `system_prompt`, `sandbox`, `tools`,
`verifier_timeout_sec` (default `PYTHON_VERIFIER_TIMEOUT_SEC`), `reference_answer` (else the value of the
column dataset.toml's `reference` names, which stays in `data`); any other column is merged into `data`.

Nulls (Parquet/`datasets` fill missing values with them) count as absent. Either every row has a verifier
or none does: a mix is almost always a mistake and is reported. Errors name the file, the row (for JSONL: the
line number; otherwise the 1-based record number) and the field, and every bad row is reported at once.

`dataset.toml` (see docs/rl.md) names the data file, a module to import so its `@verifier` functions register,
and defaults. A data file whose directory has a `dataset.toml` naming it picks that configuration up too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

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
from evsys.task.python_manifest import (
    DATASET_TOML,
    PythonDatasetConfig,
    PythonTaskLoadError,
    RowProblem,
    fail_file,
    is_python_dataset,
    read_dataset_config,
    validation_problems,
)
from evsys.task.python_rows import read_rows
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
    "reference_answer",
    "respond",
    "max_turns",
    "mcp_servers",
)
PYTHON_VERIFIER_TIMEOUT_SEC = 120.0
"""A Python task's verifier (function, rubric, LLM judge) gets this long unless the task, its dataset.toml
or `run_rollouts(verifier_timeout_sec=)` says otherwise; past it the trial is `verifier_timeout`."""
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
    reference_answer: str | None = Field(
        None,
        description="A correct answer (a number is read as its text): what the `oracle` agent answers and "
        "`evsys tasks check --oracle` expects the verifier to score 1.",
    )

    @field_validator("reference_answer", mode="before")
    @classmethod
    def _answer_text(cls, value: Any) -> Any:
        return reference_text(value)

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


def reference_text(value: Any) -> Any:
    """A reference answer as the text an agent would answer: a number's `str`, an object's JSON; text and
    None as they are."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value)
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return value  # left to the field's own error


class VerifiedTask(_PythonTaskBase):
    """A prompt scored by a verifier function (registered name or `pkg.mod:fn` import path) over `data`."""

    kind: Literal["verified"] = "verified"
    verifier: str = Field(min_length=1)


class PromptTask(_PythonTaskBase):
    """A prompt for generation only: no verifier runs and the reward is 0."""

    kind: Literal["prompt"] = "prompt"


PythonTask = Annotated[VerifiedTask | PromptTask, Field(discriminator="kind")]


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
    reference: str | None = None  # the data column holding the rows' reference answers


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
    if src.reference and fields["data"].get(src.reference) is not None:
        fields.setdefault("reference_answer", fields["data"][src.reference])
    if isinstance(fields["id"], int) and not isinstance(fields["id"], bool):
        fields["id"] = str(fields["id"])
    for name, value in src.defaults.items():
        if value is not None:
            fields.setdefault(name, value)
    model = VerifiedTask if "verifier" in fields else PromptTask
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        problems = validation_problems(exc, file, number)
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
            fail_file(base / DATASET_TOML, message, "dataset.verifier_module")


def load_python_tasks(
    source: str | Path | Iterable[Mapping[str, Any]],
    *,
    verifier: str | None = None,
    system_prompt: str | None = None,
    columns: Mapping[str, str] | None = None,
    split: str | None = None,
    reference: str | None = None,
) -> list[VerifiedTask | PromptTask]:
    """Load Python tasks from a file, a directory, or dict rows (column mapping: module docstring).

    `verifier` and `system_prompt` are defaults for rows without those columns (they beat dataset.toml's);
    `columns` maps evsys field names to the dataset's column names; `split` picks a split of a DatasetDict;
    `reference` names the column holding the reference answers (beats dataset.toml's `reference`).
    Raises `PythonTaskLoadError` listing every bad row, `DatasetNotFoundError` for a missing path.
    """
    if isinstance(source, str | Path):
        return _load_path(Path(source), verifier, system_prompt, columns, split, reference)
    if isinstance(source, Mapping):
        fail_file("<rows>", "expected an iterable of rows (dicts), got a single dict")
    records: Iterable[Mapping[str, Any]] = source
    if hasattr(source, "columns") and hasattr(source, "to_dict"):  # a pandas DataFrame
        records = source.to_dict(orient="records")
    rows = ((i, row) for i, row in enumerate(records, start=1))
    defaults = {"verifier": verifier, "system_prompt": system_prompt}
    return _convert(rows, _Source("<rows>", "item", dict(columns or {}), defaults, reference))


def _load_path(
    path: Path,
    verifier: str | None,
    system_prompt: str | None,
    columns: Mapping[str, str] | None,
    split: str | None,
    reference: str | None = None,
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
            fail_file(base / DATASET_TOML, f"{data_path} does not exist", "dataset.data")
        path = data_path
    defaults = {"verifier": verifier, "system_prompt": system_prompt}  # explicit arguments beat dataset.toml
    if config is not None:
        for name in ("verifier", "system_prompt", "sandbox", "tools", "verifier_timeout_sec"):
            defaults[name] = defaults.get(name) or getattr(config, name)
    merged_columns = {**(config.columns if config else {}), **dict(columns or {})}
    rows = read_rows(path, split or (config.split if config else None))
    reference = reference or (config.reference if config else None)
    return _convert(rows, _Source(str(path), path.stem, merged_columns, defaults, reference))


__all__ = [
    "DATASET_TOML",
    "PYTHON_VERIFIER_TIMEOUT_SEC",
    "RESERVED_DATA_FIELDS",
    "TASK_FIELDS",
    "PromptTask",
    "PythonDatasetConfig",
    "PythonTask",
    "PythonTaskLoadError",
    "RowProblem",
    "VerifiedTask",
    "is_python_dataset",
    "load_python_tasks",
    "read_dataset_config",
    "reference_text",
]
