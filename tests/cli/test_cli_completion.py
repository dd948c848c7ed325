"""Shell completion of option values: agents and harnesses, model providers, export formats, sandbox backends,
job and trial directories — the callbacks themselves, and through the shell protocol (`_EVSYS_COMPLETE`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evsys.cli.complete import (
    complete_agent,
    complete_export_format,
    complete_job_dir,
    complete_model,
    complete_sandbox,
    complete_trial_dir,
)

REPO = Path(__file__).resolve().parents[2]
SAFETY_TIMEOUT = 120  # a guard against a hung process, never a speed assertion


@pytest.fixture
def jobs(tmp_path: Path, monkeypatch) -> Path:
    """tmp_path as the working directory, holding jobs/{alpha,beta} (alpha with one trial), a directory
    that is not a job, a hidden one and a file."""
    for job in ("alpha", "beta"):
        (tmp_path / "jobs" / job).mkdir(parents=True)
        (tmp_path / "jobs" / job / "config.json").write_text("{}")
    (tmp_path / "jobs/alpha/greet__oracle__1").mkdir()
    (tmp_path / "jobs/alpha/greet__oracle__1/result.json").write_text("{}")
    (tmp_path / "jobs/alpha/agent-cache").mkdir()
    (tmp_path / "jobs/archive").mkdir()
    (tmp_path / "jobs/.hidden").mkdir()
    (tmp_path / "jobs/notes.txt").write_text("x")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "jobs"


def test_agents_models_sandboxes_and_formats():
    agents = complete_agent("")
    assert {"oracle", "nop", "loop", "claude-code", "codex", "mini-swe-agent"} <= set(agents)
    assert complete_agent("mini") == ["mini-swe-agent"]
    assert complete_agent("zz") == []
    assert {"local", "local:", "openai:", "vllm:", "sglang:", "llamacpp:"} <= set(complete_model(""))
    assert complete_model("vl") == ["vllm:"]
    assert {"local", "docker"} <= set(complete_sandbox(""))
    assert complete_export_format("") == ["atif", "openenv", "parquet", "rl", "sequences", "sft"]
    assert complete_export_format("sf") == ["sft"]


def test_job_and_trial_directories(jobs: Path):
    assert complete_job_dir("") == ["jobs/"]  # not a job: descend
    assert complete_job_dir("jobs/") == ["jobs/alpha", "jobs/archive/", "jobs/beta"]
    assert complete_job_dir("jobs/a") == ["jobs/alpha", "jobs/archive/"]
    assert complete_job_dir("jobs/.") == ["jobs/.hidden/"]
    assert complete_job_dir(f"{jobs}/b") == [f"{jobs}/beta"]  # absolute paths
    assert complete_job_dir("nowhere/") == []
    assert complete_trial_dir("jobs/alpha/") == ["jobs/alpha/agent-cache/", "jobs/alpha/greet__oracle__1"]


def _complete(words: str, cwd: Path, shell: str = "bash") -> list[str]:
    """What `evsys` answers a shell asking to complete the command line `words` (the last word may be "")."""
    env = {**os.environ, "_EVSYS_COMPLETE": f"complete_{shell}", "PYTHONPATH": str(REPO / "src")}
    if shell == "bash":
        env |= {"COMP_WORDS": words, "COMP_CWORD": str(len(words.split(" ")) - 1)}
    else:
        env["_TYPER_COMPLETE_ARGS"] = words
    script = "from evsys.cli.main import app; app(prog_name='evsys')"
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=SAFETY_TIMEOUT,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.parametrize(
    "words,expected",
    [
        ("evsys run -a cla", ["claude-code"]),
        ("evsys run --agent mini", ["mini-swe-agent"]),
        ("evsys run -m ll", ["llamacpp:"]),
        ("evsys run --sandbox doc", ["docker"]),
        ("evsys export jobs/alpha -f p", ["parquet"]),
        ("evsys run --resume jobs/b", ["jobs/beta"]),
        ("evsys jobs show jobs/al", ["jobs/alpha"]),
        ("evsys trial show jobs/alpha/g", ["jobs/alpha/greet__oracle__1"]),
        ("evsys view jobs/ar", ["jobs/archive/"]),
    ],
)
@pytest.mark.needs_process
def test_the_shell_protocol_completes_values(jobs: Path, words: str, expected: list[str]):
    assert _complete(words, jobs.parent) == expected


@pytest.mark.needs_process
def test_zsh_gets_the_same_values(jobs: Path):
    out = " ".join(_complete("evsys export jobs/alpha --format ", jobs.parent, shell="zsh"))
    assert re.findall(r'"([^"]+)"', out) == [
        "atif",
        "openenv",
        "parquet",
        "rl",
        "sequences",
        "sft",
    ]  # _arguments '*: :(("atif" ...))'
