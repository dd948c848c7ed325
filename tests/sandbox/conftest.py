"""Fixtures for local-sandbox function tests."""

from __future__ import annotations

import pytest
from sandbox_helpers import spec
from slot_backends import daytona_standin, e2b_standin, slot_backend

from evsys.sandbox import LocalSandbox

# the slot pool's backends and their stand-ins (tests/slot_backends.py)
__all__ = ["daytona_standin", "e2b_standin", "slot_backend"]


@pytest.fixture
async def sandbox():
    """A running default sandbox, stopped afterwards."""
    sb = LocalSandbox(spec())
    await sb.start()
    try:
        yield sb
    finally:
        await sb.stop()
