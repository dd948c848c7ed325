"""The pytest plugin behind the conformance suite: which backends to check, and sandboxes to check them with.

Backends: `--sandbox-backend NAME` (repeatable), else `$EVSYS_SANDBOX_BACKENDS` (comma-separated), else every
registered backend. Fixtures: `sandbox_backend` (the backend class; skips when it cannot run here),
`make_sandbox` (`await make_sandbox(**spec_fields)` gives a started sandbox, stopped after the test) and
`sandbox` (one started with the default spec).
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio

from evsys.records import SandboxSpec
from evsys.sandbox.base import Sandbox
from evsys.sandbox.registry import sandbox_backends, sandbox_class

ENV_VAR = "EVSYS_SANDBOX_BACKENDS"
_names = itertools.count()
_unavailable: dict[str, str | None] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--sandbox-backend NAME`: the backend(s) the conformance suite checks."""
    parser.addoption(
        "--sandbox-backend",
        action="append",
        default=None,
        help="sandbox backend to check (repeatable; default: every registered backend)",
    )


def backend_names(config: pytest.Config) -> list[str]:
    """The backends to check, from the option, the environment or the registry (in that order)."""
    chosen = config.getoption("sandbox_backend", default=None)
    if chosen:
        return list(chosen)
    env = os.environ.get(ENV_VAR, "")
    if env.strip():
        return [name.strip() for name in env.split(",") if name.strip()]
    return sandbox_backends()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise every test that uses `sandbox_backend_name` over the backends to check."""
    if "sandbox_backend_name" in metafunc.fixturenames:
        names = backend_names(metafunc.config)
        metafunc.parametrize("sandbox_backend_name", names, ids=names, scope="session")


@pytest.fixture(scope="session")
def sandbox_backend(sandbox_backend_name: str) -> type[Sandbox]:
    """The backend class under test; the test is skipped (with the reason) when it cannot run here."""
    cls = sandbox_class(sandbox_backend_name)
    if sandbox_backend_name not in _unavailable:
        _unavailable[sandbox_backend_name] = asyncio.run(cls.unavailable())
    reason = _unavailable[sandbox_backend_name]
    if reason is not None:
        pytest.skip(f"sandbox backend {sandbox_backend_name!r} cannot run here: {reason}")
    return cls


def new_spec(**fields: Any) -> SandboxSpec:
    """A spec with a unique name (what the suite's sandboxes are started with)."""
    fields.setdefault("name", f"conformance-{os.getpid()}-{next(_names)}")
    return SandboxSpec(**fields)


@pytest_asyncio.fixture
async def make_sandbox(
    sandbox_backend: type[Sandbox],
) -> AsyncIterator[Callable[..., Awaitable[Sandbox]]]:
    """`await make_sandbox(**spec_fields)`: a started sandbox of the backend under test."""
    started: list[Sandbox] = []

    async def make(**fields: object) -> Sandbox:
        box = sandbox_backend(new_spec(**fields))
        started.append(box)
        await box.start()
        return box

    try:
        yield make
    finally:
        for box in started:
            await box.stop()


@pytest_asyncio.fixture
async def sandbox(make_sandbox: Callable[..., Awaitable[Sandbox]]) -> Sandbox:
    """A started sandbox with the default spec (workdir /app, user agent, no network)."""
    return await make_sandbox()
