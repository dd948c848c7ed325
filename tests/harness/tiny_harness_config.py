"""The HarnessConfig that runs the tiny harness (tiny_harness.py) as a real process, for the adapter tests."""

from __future__ import annotations

import sys
from pathlib import Path

from evsys.agent.harness import HarnessConfig

TINY_HARNESS = Path(__file__).with_name("tiny_harness.py")
SYSTEM_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def tiny_config(workdir: Path, *args: str, **overrides: object) -> HarnessConfig:
    """The HarnessConfig that runs the tiny harness with `args` in `workdir`."""
    fields: dict = {
        "name": "tiny-harness",
        "command": [SYSTEM_PYTHON, "-I", str(TINY_HARNESS), *args],
        "working_directory": str(workdir),
        "startup_timeout_s": 20,
        "session_timeout_s": 60,
    }
    return HarnessConfig(**(fields | overrides))
