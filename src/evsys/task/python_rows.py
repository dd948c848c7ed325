"""Reading a Python-task dataset's rows: JSONL (line numbers), Parquet and saved `datasets` directories
(1-based record numbers; both need `evsys[rl]`). Each source yields (row number, row); a JSONL line that is
not JSON yields a `RowProblem` in its place."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from evsys.task.python_manifest import RowProblem, fail_file


def rl_import(module: str, what: str) -> Any:
    """Import `module` (a package of the `rl` extra); an ImportError naming the extra for `what`."""
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
        fail_file(path, f"is not UTF-8 text ({exc.reason} at byte {exc.start})")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            yield number, RowProblem(file=str(path), row=number, message=f"invalid JSON: {exc.msg}")


def _read_parquet(path: Path) -> Iterable[tuple[int, Any]]:
    parquet = rl_import("pyarrow.parquet", "reading Parquet")
    try:
        table = parquet.read_table(path)
    except Exception as exc:
        fail_file(path, f"unreadable Parquet: {exc}")
    return enumerate(table.to_pylist(), start=1)


def _read_hf_dir(path: Path, split: str | None) -> Iterable[tuple[int, Any]]:
    datasets = rl_import("datasets", "reading a saved datasets directory")
    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:
        fail_file(path, f"unreadable datasets directory: {exc}")
    if isinstance(loaded, datasets.DatasetDict):
        splits = list(loaded.keys())
        if split is None and len(splits) != 1:
            fail_file(path, f"holds splits {', '.join(splits)}; choose one with split=", "split")
        chosen = split or splits[0]
        if chosen not in loaded:
            fail_file(path, f"no split {chosen!r}; available: {', '.join(splits)}", "split")
        loaded = loaded[chosen]
    return enumerate(loaded, start=1)


def _is_hf_dir(path: Path) -> bool:
    return any((path / name).is_file() for name in ("dataset_info.json", "state.json", "dataset_dict.json"))


def read_rows(path: Path, split: str | None) -> Iterable[tuple[int, Any]]:
    """(row number, row) of a data file or a saved datasets directory (`split` picks a split)."""
    if path.is_dir():
        if _is_hf_dir(path):
            return _read_hf_dir(path, split)
        fail_file(path, "is neither a saved datasets directory nor has a dataset.toml")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return _read_jsonl(path)
    if suffix in (".parquet", ".pq"):
        return _read_parquet(path)
    kinds = "use .jsonl, .parquet or a datasets directory"
    fail_file(path, f"unsupported file type {suffix or '(none)'!r}; {kinds}")
