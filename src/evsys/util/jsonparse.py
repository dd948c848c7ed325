"""Parsing JSON that came from someone else: nesting is bounded, and a message nested too deeply is a
`ValueError` like any other invalid JSON (never a `RecursionError` that ends the caller's session)."""

from __future__ import annotations

import json
from typing import Any

MAX_JSON_DEPTH = 128  # far deeper than any real request, far below the interpreter's recursion limit


class JsonTooDeepError(ValueError):
    """The JSON nests arrays and objects deeper than allowed."""


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
