"""`evsys harness list|install` as a user runs them."""

from __future__ import annotations

import subprocess
import sys

import pytest

EVSYS = [sys.executable, "-m", "evsys.cli.main", "harness"]


@pytest.mark.needs_process
def test_harness_list_names_every_catalog_harness_and_what_it_installs():
    done = subprocess.run([*EVSYS, "list"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    harnesses = [("claude-code", "npm"), ("codex", "npm"), ("mini-swe-agent", "pip")]
    harnesses += [("gemini-cli", "google"), ("opencode", "npm"), ("openclaw", "on Node")]
    for name, installs in harnesses:
        row = next(line for line in done.stdout.splitlines() if f" {name} " in line)
        assert installs in row and "unavailable" not in row
    assert "acp:<command>" in done.stdout


@pytest.mark.needs_process
def test_harness_install_of_an_unknown_name_lists_the_known_ones():
    done = subprocess.run([*EVSYS, "install", "no-such-harness"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "unknown harness 'no-such-harness'" in done.stderr and "claude-code" in done.stderr
