"""Named plug-in registries: one mechanism for every plug-in kind evsys has.

A `Registry` maps names to entries (a class, a factory, or a record holding one). An entry comes from one of
three places, in this order of precedence: registered in code (`register`), registered lazily as a
`module:attribute` path (`register_lazy`; a registry starts with evsys's own plug-ins of its group this way,
from evsys.util.builtin_plugins, so that naming one imports nothing), or an installed package's entry point in
the registry's group (`importlib.metadata`, read the first time a name is not found or the names are listed).
A lazy entry is imported only when its name is asked for, and `adapt` turns what was imported into an entry
(TypeError for the wrong kind of object).

An unknown name raises the registry's `UnknownNameError` subclass, whose message lists every available name
and suggests the closest ones (`did_you_mean`, the one helper evsys uses for such hints).

The entry-point groups evsys reads (one per kind; see docs/extending.md): `evsys.sandboxes`, `evsys.agents`,
`evsys.harnesses`, `evsys.executors`, `evsys.models` and `evsys.verifiers`.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar

from evsys.util.builtin_plugins import builtin_plugins

T = TypeVar("T")


def closest(word: str, choices: Sequence[str], *, n: int = 1, cutoff: float = 0.6) -> list[str]:
    """Up to `n` of `choices` closest to `word` (a typo's likely intent), best first."""
    return difflib.get_close_matches(word, list(choices), n=n, cutoff=cutoff)


def did_you_mean(word: str, choices: Sequence[str], *, n: int = 1, cutoff: float = 0.6) -> str:
    """` (did you mean 'x'?)` (or `'x' or 'y'` for `n` > 1) for the choices closest to `word`; "" for none."""
    close = closest(word, choices, n=n, cutoff=cutoff)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


class UnknownNameError(ValueError):
    """A name no registry entry and no installed entry point answers to."""

    def __init__(self, kind: str, name: str, available: list[str]) -> None:
        listed = ", ".join(available) or "none"
        super().__init__(f"unknown {kind} {name!r}{did_you_mean(name, available)}; available: {listed}")
        self.name = name
        self.available = available
        self.suggestions = closest(name, available, n=3)


class PluginLoadError(RuntimeError):
    """An entry point exists for the name but importing it failed or gave the wrong kind of object."""


class Registry(Generic[T]):
    """Name -> entry, with lazy `module:attribute` entries and `group` entry points (see the module doc).

    `kind` names the entries in messages; `adapt(name, loaded)` turns an imported object into an entry;
    `unknown` is the exception class for an unknown name and `load_error` the one for an entry that cannot
    be imported, so each plug-in kind raises what its callers already catch."""

    def __init__(
        self,
        kind: str,
        group: str,
        adapt: Callable[[str, object], T],
        *,
        unknown: type[UnknownNameError] = UnknownNameError,
        load_error: type[Exception] = PluginLoadError,
    ) -> None:
        self.kind = kind
        self.group = group
        self._adapt = adapt
        self._unknown = unknown
        self._load_error = load_error
        self._entries: dict[str, T] = {}
        self._lazy: dict[str, EntryPoint] = {
            name: EntryPoint(name=name, value=target, group=group)
            for name, target in builtin_plugins(group).items()
        }
        self._entry_points: dict[str, EntryPoint] | None = None
        self._lock = threading.Lock()

    def register(self, name: str, entry: T, *, replace: bool = False) -> T:
        """Add `entry` under `name`; registering a taken name raises ValueError unless `replace`."""
        self._check_name(name, replace)
        with self._lock:
            self._entries[name] = entry
            self._lazy.pop(name, None)
        return entry

    def register_lazy(self, name: str, target: str, *, replace: bool = False) -> None:
        """Add `name` as a `module:attribute` path, imported (and adapted) the first time it is asked for."""
        self._check_name(name, replace)
        module, sep, attribute = target.partition(":")
        if not module or not sep or not attribute:
            raise ValueError(f"{self.kind} {name!r}: expected 'module:attribute', got {target!r}")
        with self._lock:
            self._entries.pop(name, None)
            self._lazy[name] = EntryPoint(name=name, value=target, group=self.group)

    def _check_name(self, name: str, replace: bool) -> None:
        if not name or ":" in name or name != name.strip():
            raise ValueError(
                f"{self.kind} name {name!r} must be non-empty, without ':', or surrounding space"
            )
        if not replace and (name in self._entries or name in self._lazy):
            raise ValueError(f"{self.kind} {name!r} is already registered (pass replace=True to override)")

    def unregister(self, name: str) -> None:
        """Forget `name` registered in code (no error when it is not; entry points stay)."""
        with self._lock:
            self._entries.pop(name, None)
            self._lazy.pop(name, None)

    def names(self) -> list[str]:
        """Every registered name and every installed entry point's name, sorted."""
        return sorted({*self._entries, *self._lazy, *self._discover()})

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (
            name in self._entries or name in self._lazy or name in self._discover()
        )

    def check(self, name: str) -> str:
        """`name` when something answers to it, else the registry's `UnknownNameError` (imports nothing)."""
        if name not in self:
            raise self.unknown_error(name)
        return name

    def unknown_error(self, name: str) -> UnknownNameError:
        """The error for an unknown `name`: every available name and the closest ones."""
        return self._unknown(self.kind, name, self.names())

    def loaded(self, name: str) -> T | None:
        """The entry for `name` if registered in code or already imported, else None (imports nothing)."""
        return self._entries.get(name)

    def get(self, name: str) -> T:
        """The entry for `name`, importing a lazy one on first use; `UnknownNameError` when there is none."""
        entry = self._entries.get(name)
        if entry is not None:
            return entry
        point = self._lazy.get(name) or self._discover().get(name)
        if point is None:
            raise self.unknown_error(name)
        try:
            entry = self._adapt(name, point.load())
        except Exception as exc:
            raise self._load_error(
                f"{self.kind} {name!r} from {point.value!r} (group {self.group!r}) could not be loaded: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        with self._lock:
            return self._entries.setdefault(name, entry)

    def refresh(self) -> None:
        """Read the entry-point group again on next use (after installing a package at run time)."""
        with self._lock:
            self._entry_points = None

    def _discover(self) -> dict[str, EntryPoint]:
        points = self._entry_points
        if points is None:
            points = {ep.name: ep for ep in entry_points(group=self.group)}
            self._entry_points = points
        return points
