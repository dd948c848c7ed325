"""Selecting tasks by their `task.toml` `[metadata]` (`evsys run --filter KEY=VALUE`).

A filter is `KEY=GLOB`: it matches a task whose metadata value under KEY matches the glob (`fnmatch` rules,
case-sensitive); a list value (`tags = ["files", "shell"]`) matches when any element does. Filters on the
same key are alternatives (`difficulty=easy` or `difficulty=medium`); filters on different keys must all
hold. A task without the key, or without metadata at all, is not selected.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Any

from pydantic import BaseModel, Field


class TaskFilter(BaseModel):
    """One `KEY=GLOB` filter on task metadata."""

    key: str = Field(min_length=1)
    pattern: str

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        """True when the metadata value under `key` (or any element of a list value) matches the glob."""
        if self.key not in metadata:
            return False
        value = metadata[self.key]
        values = value if isinstance(value, list | tuple | set) else [value]
        return any(fnmatchcase(_text(v), self.pattern) for v in values)


def parse_filter(text: str) -> TaskFilter:
    """`KEY=GLOB` as a `TaskFilter`; ValueError naming the text when it has no `=` or no key."""
    key, sep, pattern = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--filter {text!r}: expected KEY=VALUE, e.g. difficulty=easy or tags='py*'")
    return TaskFilter(key=key.strip(), pattern=pattern.strip())


def metadata_selected(metadata: Mapping[str, Any] | None, filters: Iterable[TaskFilter]) -> bool:
    """True when `metadata` passes every filter key (any filter of one key may match); no filters: True."""
    by_key: dict[str, list[TaskFilter]] = {}
    for item in filters:
        by_key.setdefault(item.key, []).append(item)
    return all(any(f.matches(metadata or {}) for f in alternatives) for alternatives in by_key.values())


def _text(value: Any) -> str:
    """A metadata value as the text a glob is matched against (TOML booleans as `true`/`false`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
