"""Selecting tasks by name (`evsys run --task`, a served `reset(task=...)`) and by their `task.toml`
`[metadata]` (`evsys run --filter KEY=VALUE`).

Task names are Harbor's `org/name` (`evsys/create-file`); a user may give the short name (`create-file`) where
it is unambiguous. A `--task` glob without `/` matches the full name or the short name; a name given to pick
one task is the task of that full name, else the only task of that short name (`resolve_task_name`).

A filter is `KEY=GLOB`: it matches a task whose metadata value under KEY matches the glob (`fnmatch` rules,
case-sensitive); a list value (`tags = ["files", "shell"]`) matches when any element does. Filters on the
same key are alternatives (`difficulty=easy` or `difficulty=medium`); filters on different keys must all
hold. A task without the key, or without metadata at all, is not selected.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

from pydantic import BaseModel, Field

from evsys.util.registry import did_you_mean

SHOWN_NAMES = 20  # task names an unknown-name error lists


class TaskNameError(LookupError):
    """A name that picks no task, or several (a short name two orgs share); `str()` says which and lists
    the known names."""


def short_name(name: str) -> str:
    """A task name without its `org/` prefix: `evsys/create-file` -> `create-file` (a bare name: itself)."""
    return name.split("/", 1)[-1]


def name_matches(pattern: str, name: str) -> bool:
    """True when the glob matches the task's full name or, for a pattern without `/`, its short name."""
    if fnmatchcase(name, pattern):
        return True
    return "/" not in pattern and fnmatchcase(short_name(name), pattern)


def resolve_task_name(name: str, names: Sequence[str]) -> str:
    """The task `name` picks among `names`: the one of that full name, else the only one of that short name.
    TaskNameError when none has it (naming the closest and the known ones) or several share the short name."""
    if name in names:
        return name
    found = [known for known in names if short_name(known) == name]
    if len(found) == 1:
        return found[0]
    if found:
        raise TaskNameError(f"{name!r} names {len(found)} tasks ({', '.join(found)}); give the full name")
    shown = ", ".join(names[:SHOWN_NAMES]) + (" ..." if len(names) > SHOWN_NAMES else "")
    hint = did_you_mean(name, [*names, *map(short_name, names)])
    raise TaskNameError(f"no task named {name!r}{hint}; tasks: {shown}")


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
