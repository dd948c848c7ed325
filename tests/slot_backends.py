"""The sandbox backends the slot pool's tests run on (`SLOT_BACKENDS`), each with the fixture that serves its
stand-in service (tests/sandbox/cloud) when it is a cloud backend. A conftest imports `slot_backend` (and the
stand-in fixtures); a test taking `slot_backend` runs once per backend (tests/sandbox/test_slot_pool.py,
tests/security/test_slot_isolation.py). A new backend is one entry here, its stand-in's fixture imported
below. `daytona` passes them too; it is left out to keep the suite short (its sandboxes are the same
RemoteSandbox as E2B's)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "sandbox" / "cloud"))
from standins import daytona_standin, e2b_standin, modal_standin

__all__ = ["SLOT_BACKENDS", "daytona_standin", "e2b_standin", "modal_standin", "slot_backend"]

# backend -> the fixture serving its stand-in (None: runs on this machine)
SLOT_BACKENDS: dict[str, str | None] = {"local": None, "e2b": "e2b_standin", "modal": "modal_standin"}


@pytest.fixture(params=list(SLOT_BACKENDS))
def slot_backend(request: pytest.FixtureRequest) -> str:
    """The name of a backend of SLOT_BACKENDS, its stand-in served."""
    standin = SLOT_BACKENDS[request.param]
    if standin is not None:
        request.getfixturevalue(standin)
    return request.param
