"""Fixtures for local-sandbox function tests."""

from __future__ import annotations

import pytest
from sandbox_helpers import spec

from evsys.sandbox import LocalSandbox
from slot_backends import daytona_standin, e2b_standin, modal_standin, slot_backend

# the slot pool's backends and their stand-ins (tests/slot_backends.py)
__all__ = ["daytona_standin", "e2b_standin", "modal_standin", "slot_backend"]


@pytest.fixture
async def sandbox():
    """A running default sandbox, stopped afterwards."""
    sb = LocalSandbox(spec())
    await sb.start()
    try:
        yield sb
    finally:
        await sb.stop()
