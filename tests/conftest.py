"""Shared fixtures for the whole suite.

The suite passes whichever of its files run, in whatever order:
- pytest imports test files and helper modules by their file name (each test directory goes on sys.path), so
  every name under tests/ is unique, and helpers are imported by that name: never `from conftest import`
  (every conftest.py is the module `conftest`) nor `from tests.<dir> import` (`tests` is importable only when
  the working directory is on sys.path); ruff enforces both (TID251).
- What a test changes in the process it undoes: environment variables and registrations through monkeypatch
  or a fixture's teardown, weights loaded into a private copy of a shared model. Fixtures that start
  processes (a Ray cluster, servers) stop them when the module or session that needs them ends, and a test
  that counts sandboxes counts only those it started.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

# A private dockerd and a synthesised Debian base for the docker backend (started only by tests that ask);
# the fast and heavy tiers (`make test-fast`: tests/tiers.py).
pytest_plugins = ["dockerd_fixtures", "tiers"]

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = REPO_ROOT / "examples"


@pytest.fixture
def examples_dir() -> Path:
    """The bundled example datasets (examples/tasks, ...)."""
    return EXAMPLES


async def _eventually(condition, what: str, limit: float = 120.0) -> None:
    deadline = asyncio.get_running_loop().time() + limit
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"never happened: {what}")
        await asyncio.sleep(0.02)


@pytest.fixture
def eventually():
    """`await eventually(condition, what)`: wait until `condition()` holds (checked every 20 ms); the test
    fails naming `what` after two minutes (a bound on hanging, never a speed assertion)."""
    return _eventually


_MEMORY_NAMES = itertools.count(1)


@pytest.fixture
def memory_backend():
    """`memory_backend(programs)` registers an in-memory sandbox backend running `programs`
    (evsys.testing.memory_sandbox) and returns its name; `sandbox_class(name).made` lists its sandboxes. For
    tests of behaviour around a sandbox; each is unregistered after the test."""
    from evsys.sandbox import register_sandbox, unregister_sandbox  # here: other venvs load this conftest too
    from evsys.testing.memory_sandbox import memory_backend as make_memory_backend

    names: list[str] = []

    def register(programs: dict | None = None) -> str:
        name = f"memory-{next(_MEMORY_NAMES)}"
        register_sandbox(name, make_memory_backend(programs))
        names.append(name)
        return name

    yield register
    for name in names:
        unregister_sandbox(name)
