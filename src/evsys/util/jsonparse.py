"""Parsing JSON that came from someone else: nesting is bounded, and a message nested too deeply is a
`ValueError` like any other invalid JSON (never a `RecursionError` that ends the caller's session). The
number of values matters too: a body of `[{},{},...]` makes a Python object of ~70 bytes from every 3 bytes
of text, so a size limit alone lets 32 MiB of text become ~800 MiB of objects; `value_count` measures it
before anything is parsed."""

from __future__ import annotations

import json
import re
from typing import Any

MAX_JSON_DEPTH = 128  # far deeper than any real request, far below the interpreter's recursion limit
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes included


class JsonTooDeepError(ValueError):
    """The JSON nests arrays and objects deeper than allowed."""


def value_count(data: str | bytes | bytearray, stop_after: int) -> int:
    """About how many values `data` holds, never fewer than it holds: 1 + its commas and opening brackets.
    Counted on the text as it is (strings included) first; only a count over `stop_after` is redone with the
    strings left out, so text full of commas and braces inside strings is never refused for them."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    count = _structural(raw)
    return count if count <= stop_after else _structural(_STRING.sub(b'""', raw))


def _structural(raw: bytes) -> int:
    return 1 + raw.count(b",") + raw.count(b"[") + raw.count(b"{")


def loads_bounded(data: str | bytes | bytearray, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """`json.loads(data)`, refusing documents nested deeper than `max_depth` arrays/objects with
    `JsonTooDeepError` (a `ValueError`); other invalid JSON raises `json.JSONDecodeError` as usual."""
    too_deep = JsonTooDeepError(f"JSON nested deeper than {max_depth} levels")
    try:
        value = json.loads(data)
    except RecursionError:
        raise too_deep from None
    if nesting_depth(value, max_depth) > max_depth:
        raise too_deep
    return value


def nesting_depth(value: Any, stop_after: int) -> int:
    """How deeply `value` nests lists and dicts (a scalar is 0), counting no further than `stop_after + 1`.
    Level by level, without recursion, so any depth is safe to measure."""
    level = [value] if isinstance(value, list | dict) else []
    depth = 0
    while level and depth <= stop_after:
        depth += 1
        below = []
        for node in level:
            for child in node.values() if isinstance(node, dict) else node:
                if isinstance(child, list | dict):
                    below.append(child)
        level = below
    return depth
