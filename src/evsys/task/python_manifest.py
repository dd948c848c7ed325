"""Python-task dataset manifests (`dataset.toml` with `[dataset] data = ...`) and the errors of loading one.

`PythonDatasetConfig` is the `[dataset]` table (docs/rl.md): the data file, the verifier module, defaults for
rows, the dataset's `name`, `version` and `description`, and the `reference` column (the rows' reference
answers). `RowProblem` / `PythonTaskLoadError` name the file, row and field of everything wrong.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import NoReturn

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evsys.task.harbor_dataset import manifest_kind
from evsys.task.loader import DatasetNotFoundError

DATASET_TOML = "dataset.toml"
REFERENCE_HINT = (
    'declare the column holding the reference answers in dataset.toml (`reference = "answer"`) or give rows '
    "a `reference_answer`"
)


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

    name: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="The dataset column of its trials (job results, metrics); default the directory's name.",
    )
    version: str | None = Field(None, min_length=1, max_length=100, description="Recorded with each trial.")
    description: str | None = Field(None, description="What the dataset is (shown by `evsys datasets show`).")
    data: str = Field(description="The data file or datasets directory, relative to dataset.toml.")
    verifier_module: str | None = Field(None, description="A .py file (relative) or a dotted module.")
    verifier: str | None = Field(None, description="Default verifier for rows without a verifier column.")
    system_prompt: str | None = None
    sandbox: bool | None = None
    tools: list[str] | None = None
    verifier_timeout_sec: float | None = Field(None, gt=0, description="Default verifier limit for rows.")
    reference: str | None = Field(
        None,
        min_length=1,
        description="The column holding each row's reference answer (kept in the row's data too): what "
        "`-a oracle` answers and `evsys tasks check --oracle` scores.",
    )
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
        fail_file(file, f"invalid TOML: {exc}")
    try:
        return _DatasetFile.model_validate(raw).dataset
    except ValidationError as exc:
        raise PythonTaskLoadError(validation_problems(exc, str(file), None)) from None


def validation_problems(exc: ValidationError, file: str, row: int | None) -> list[RowProblem]:
    return [
        RowProblem(file=file, row=row, field=".".join(map(str, err["loc"])) or None, message=err["msg"])
        for err in exc.errors()
    ]


def fail_file(file: Path | str, message: str, field: str | None = None) -> NoReturn:
    """Raise a PythonTaskLoadError with one problem about the whole file."""
    raise PythonTaskLoadError([RowProblem(file=str(file), field=field, message=message)])
