"""Checking a user's string against a fixed set of names (a `Literal` type's values)."""

from __future__ import annotations

from typing import TypeGuard, TypeVar

Name = TypeVar("Name", bound=str)


def is_one_of(value: str, names: tuple[Name, ...]) -> TypeGuard[Name]:
    """Whether `value` is one of `names` (e.g. `get_args(SomeLiteral)`); narrows it to their type."""
    return value in names
