"""Job data cannot drive the user's terminal: control sequences an agent printed in its sandbox are stored as
they are, and `evsys run --stream`, `evsys trial show` and `evsys jobs show` print them as visible escapes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_output_agents import ATTACK, OSC52
from typer.testing import CliRunner

from evsys.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples/tasks"
RAW = ("\x1b", "\x07", "\x9b")  # ESC, BEL (ends OSC), C1 CSI: none may reach the terminal
VISIBLE_OSC52 = "\\x1b]52;c;ZXZzeXMtcHduZWQ=\\x07"


@pytest.fixture(scope="module")
def attacked_job(tmp_path_factory) -> tuple[Path, str]:
    """A real `evsys run --stream` of the terminal-attack agent: its job directory and the live output."""
    jobs = tmp_path_factory.mktemp("terminal")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    args = [sys.executable, "-m", "evsys.cli.main", "run", str(EXAMPLES), "--task", "create-file"]
    args += ["-a", "hostile_output_agents:TerminalAttackAgent", "--jobs-dir", str(jobs)]
    args += ["--job-name", "attacked", "--stream"]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return jobs / "attacked", done.stdout + done.stderr


def _trial_dir(job_dir: Path) -> Path:
    (trial,) = [p for p in job_dir.iterdir() if (p / "result.json").is_file()]
    return trial


def _cli(*args: object) -> str:
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.needs_process
def test_the_attack_bytes_are_stored_as_printed(attacked_job):
    """Positive control: the sandbox printed the sequences and the job kept them byte for byte."""
    trial = _trial_dir(attacked_job[0])
    result = json.loads((trial / "result.json").read_text())
    steps = json.loads((trial / "trajectory.json").read_text())["steps"]
    assert ATTACK in result["failure"]["message"]
    assert ATTACK in steps[0]["message"] and ATTACK in steps[0]["reasoning_content"]


@pytest.mark.needs_process
def test_run_stream_prints_the_event_escaped(attacked_job):
    _, output = attacked_job
    assert "event " + VISIBLE_OSC52 in output
    assert not any(c in output for c in RAW)


@pytest.mark.needs_process
def test_trial_show_prints_message_reasoning_and_failure_escaped(attacked_job):
    output = _cli("trial", "show", _trial_dir(attacked_job[0]))
    for where in ("message", "reasoning", "failure"):
        assert f"{where} {VISIBLE_OSC52}" in output.replace("\n", "")
    assert "\\x1b[2J" in output and "\\x9b2J" in output
    assert not any(c in output for c in RAW)


@pytest.mark.needs_process
def test_jobs_show_prints_the_failure_escaped(attacked_job):
    output = _cli("jobs", "show", attacked_job[0])
    assert VISIBLE_OSC52 in output.replace("\n", "")
    assert not any(c in output for c in RAW)


def test_terminal_safe_keeps_newlines_tabs_and_text():
    from evsys.util.text import terminal_safe

    assert terminal_safe("a\tb\nc é ✓") == "a\tb\nc é ✓"
    assert terminal_safe(OSC52 + "\r\x00\x7f") == VISIBLE_OSC52 + "\\x0d\\x00\\x7f"
