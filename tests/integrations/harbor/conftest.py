"""Harbor's integration tests run Harbor itself from its own virtualenv (it needs Python >= 3.12); without
that virtualenv they skip, saying how to get it."""

from __future__ import annotations

from pathlib import Path

import pytest
from harbor_runs import BOOTSTRAP_HINT, harbor_venv


@pytest.fixture(scope="session")
def harbor() -> Path:
    """The virtualenv holding Harbor (skips the test when there is none)."""
    venv = harbor_venv()
    if venv is None:
        pytest.skip(f"Harbor is not installed: no .venv-harbor with bin/harbor ({BOOTSTRAP_HINT})")
    return venv
