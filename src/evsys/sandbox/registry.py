"""Sandbox backends by name: `SANDBOXES` (an `evsys.util.registry.Registry`), `register_sandbox`, the
`evsys.sandboxes` entry-point group, `create_sandbox`.

A backend is a `Sandbox` subclass. evsys's own (`local`, `docker`, `daytona`, `e2b`, `modal`) are declared in
evsys.util.builtin_plugins and registered lazily, so naming one imports nothing; a third-party package
declares its backend as an entry point, imported only when that backend is first used:

```toml
[project.entry-points."evsys.sandboxes"]
mybackend = "mypkg.sandbox:MySandbox"
```

Code can also register one directly: `register_sandbox("mine", MySandbox)` (or a "module:Class" string to
import lazily). Names registered in code win over entry points of the same name.
"""

from __future__ import annotations

from evsys.records import SandboxSpec
from evsys.sandbox.base import Sandbox, SandboxUnsupported
from evsys.util.registry import Registry, UnknownNameError

ENTRY_POINT_GROUP = "evsys.sandboxes"
DEFAULT_BACKEND = "local"


class UnknownSandboxBackend(UnknownNameError, SandboxUnsupported):
    """No backend is registered under the requested name (the message lists the available ones)."""


def _backend_class(name: str, cls: object) -> type[Sandbox]:
    if not (isinstance(cls, type) and issubclass(cls, Sandbox)):
        raise SandboxUnsupported(
            f"sandbox backend {name!r} is {cls!r}, not a subclass of evsys.sandbox.Sandbox"
        )
    return cls


SANDBOXES: Registry[type[Sandbox]] = Registry(
    "sandbox backend",
    ENTRY_POINT_GROUP,
    _backend_class,
    unknown=UnknownSandboxBackend,
    load_error=SandboxUnsupported,
)


def register_sandbox(name: str, backend: type[Sandbox] | str, *, replace: bool = False) -> None:
    """Make `backend` (a `Sandbox` subclass, or "module:Class" imported on first use) available as `name`."""
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"sandbox backend names are letters, digits, '-' and '_'; got {name!r}")
    if isinstance(backend, str):
        SANDBOXES.register_lazy(name, backend, replace=replace)
    else:
        SANDBOXES.register(name, _backend_class(name, backend), replace=replace)


def unregister_sandbox(name: str) -> None:
    """Forget a backend registered with `register_sandbox` (entry points stay)."""
    SANDBOXES.unregister(name)


def sandbox_backends() -> list[str]:
    """The names of every available backend (built in, entry points, registered in code), sorted."""
    return SANDBOXES.names()


def check_backend(name: str) -> None:
    """Raise `UnknownSandboxBackend` (listing the available ones, with a did-you-mean) unless `name` exists.
    Cheap: imports nothing."""
    SANDBOXES.check(name)


def sandbox_class(name: str) -> type[Sandbox]:
    """The `Sandbox` subclass registered as `name`, imported on first use."""
    return SANDBOXES.get(name)


def create_sandbox(spec: SandboxSpec, backend: str = DEFAULT_BACKEND) -> Sandbox:
    """A not-yet-started sandbox for `spec` on `backend`; `SandboxUnsupported` when the backend is unknown or
    cannot provide the spec (network mode, binds, image)."""
    return sandbox_class(backend)(spec)
