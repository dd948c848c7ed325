"""`python -m evsys` is the `evsys` command (for environments whose scripts are not on PATH)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.needs_process
@pytest.mark.needs_sandbox
def test_python_m_evsys_runs_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "evsys", "tasks", "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "Usage: evsys tasks" in done.stdout
