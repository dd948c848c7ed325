"""Shared fixtures for the whole suite."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

# A private dockerd and a synthesised Debian base for the docker backend (started only by tests that ask).
pytest_plugins = ["dockerd_fixtures"]

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
