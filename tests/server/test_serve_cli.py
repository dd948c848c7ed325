"""`evsys serve` refuses what it cannot serve with a clear message and exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from serve_process import SRC


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["/nonexistent/tasks"], "'/nonexistent/tasks' does not exist"),
        (["examples/tasks", "--harness", "codex"], "--harness needs a model: pass -m"),
        (["examples/tasks", "--harness", "oracle", "-m", "local"], "is not a harness agent"),
    ],
)
@pytest.mark.needs_process
def test_serve_refuses_bad_arguments_with_a_clear_message(args, message, tmp_path, examples_dir):
    args = [str(examples_dir.parent / a) if a.startswith("examples/") else a for a in args]
    cmd = [sys.executable, "-m", "evsys.cli.main", "serve", *args, "--port", "0", "--jobs-dir", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2
    assert message in " ".join(done.stderr.split())
