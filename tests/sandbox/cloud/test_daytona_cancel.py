"""A Daytona sandbox whose start is cancelled while the service creates it (a job cancelled by Ctrl-C) closes
the SDK's HTTP sessions: no "Unclosed client session" is printed. The real `daytona` SDK talks to a service on
127.0.0.1 that holds the create request open, in a fresh interpreter with -X dev."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[2] / "src"


def test_a_start_cancelled_during_create_leaves_no_http_session() -> None:
    pytest.importorskip("daytona", reason="the daytona extra is not installed")
    env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONWARNINGS": "default"}
    argv = [sys.executable, "-X", "dev", str(HERE / "daytona_cancel_probe.py")]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "finished" in done.stdout, done.stderr[-3000:]
    assert "POST /api/sandbox" in done.stdout  # the create request was in flight when the start was cancelled
    assert "Unclosed" not in done.stderr, done.stderr[-3000:]
