"""Fixtures for local-sandbox function tests."""

from __future__ import annotations

import pytest
from sandbox_helpers import spec

from evsys.sandbox import LocalSandbox


@pytest.fixture
async def sandbox():
    """A running default sandbox, stopped afterwards."""
    sb = LocalSandbox(spec())
    await sb.start()
    try:
        yield sb
    finally:
        await sb.stop()
