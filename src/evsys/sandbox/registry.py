"""Sandbox backends by name: `register_sandbox`, the `evsys.sandboxes` entry-point group, `create_sandbox`.

A backend is a `Sandbox` subclass. evsys registers its own (`local`); a third-party package declares its
backend as an entry point and is imported only when that backend is first used:

```toml
[project.entry-points."evsys.sandboxes"]
mybackend = "mypkg.sandbox:MySandbox"
```

Code can also register one directly: `register_sandbox("mine", MySandbox)` (or a "module:Class" string to
import lazily). Names registered in code win over entry points of the same name.
"""

from __future__ import annotations

import difflib
from importlib.metadata import EntryPoint, entry_points

from evsys.records import SandboxSpec
from evsys.sandbox.base import Sandbox, SandboxUnsupported

ENTRY_POINT_GROUP = "evsys.sandboxes"
DEFAULT_BACKEND = "local"

# The backends shipped with evsys (also declared as entry points in pyproject.toml; these keep them usable
# from a source tree whose package metadata predates the entry points).
_BUILTIN: dict[str, str] = {
    "local": "evsys.sandbox.local.sandbox:LocalSandbox",
    "docker": "evsys.sandbox.docker.sandbox:DockerSandbox",
}
_registered: dict[str, type[Sandbox] | str] = {}
_loaded: dict[str, type[Sandbox]] = {}


class UnknownSandboxBackend(SandboxUnsupported, ValueError):
    """No backend is registered under the requested name (the message lists the available ones)."""


def register_sandbox(name: str, backend: type[Sandbox] | str, *, replace: bool = False) -> None:
    """Make `backend` (a `Sandbox` subclass, or "module:Class" imported on first use) available as `name`."""
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"sandbox backend names are letters, digits, '-' and '_'; got {name!r}")
    if name in _registered and not replace:
        raise ValueError(f"sandbox backend {name!r} is already registered (pass replace=True to override)")
    if not isinstance(backend, str):
        _check_class(name, backend)
    _registered[name] = backend
    _loaded.pop(name, None)


def unregister_sandbox(name: str) -> None:
    """Forget a backend registered with `register_sandbox` (built-ins and entry points stay)."""
    _registered.pop(name, None)
    _loaded.pop(name, None)


def _entry_points() -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _sources() -> dict[str, type[Sandbox] | str]:
    return {**_BUILTIN, **_entry_points(), **_registered}


def sandbox_backends() -> list[str]:
    """The names of every available backend (built in, entry points, registered in code), sorted."""
    return sorted(_sources())


def _unknown(name: str) -> UnknownSandboxBackend:
    names = sandbox_backends()
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return UnknownSandboxBackend(f"unknown sandbox backend {name!r}{hint}; available: {', '.join(names)}")


def check_backend(name: str) -> None:
    """Raise `UnknownSandboxBackend` (listing the available ones, with a did-you-mean) unless `name` exists.
    Cheap: imports nothing."""
    if name not in _sources():
        raise _unknown(name)


def sandbox_class(name: str) -> type[Sandbox]:
    """The `Sandbox` subclass registered as `name`, imported on first use."""
    if name in _loaded:
        return _loaded[name]
    source = _sources().get(name)
    if source is None:
        raise _unknown(name)
    cls = _import(name, source) if isinstance(source, str) else source
    _check_class(name, cls)
    _loaded[name] = cls
    return cls


def _import(name: str, target: str) -> object:
    try:
        return EntryPoint(name=name, value=target, group=ENTRY_POINT_GROUP).load()
    except (ImportError, AttributeError) as exc:
        raise SandboxUnsupported(f"sandbox backend {name!r} ({target}) cannot be loaded: {exc}") from exc


def _check_class(name: str, cls: object) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Sandbox)):
        raise SandboxUnsupported(
            f"sandbox backend {name!r} is {cls!r}, not a subclass of evsys.sandbox.Sandbox"
        )


def create_sandbox(spec: SandboxSpec, backend: str = DEFAULT_BACKEND) -> Sandbox:
    """A not-yet-started sandbox for `spec` on `backend`; `SandboxUnsupported` when the backend is unknown or
    cannot provide the spec (network mode, binds, image)."""
    return sandbox_class(backend)(spec)
