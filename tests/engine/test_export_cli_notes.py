"""`evsys export` says when a file it wrote holds no rows (`--successful-only` with no success), and `-f atif
-o out/atif` writes the copies into out/atif itself, not out/atif/atif."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_tasks import make_task
from typer.testing import CliRunner

from evsys.cli.main import app


@pytest.fixture
def failed_job(tmp_path: Path, monkeypatch) -> Path:
    """A finished job whose one trial talked and scored 0."""
    monkeypatch.setenv("EVSYS_SANDBOX_DIR", str(tmp_path / "scratch"))
    task = make_task(tmp_path / "tasks", "write-ok")
    agent = "engine_agents:TalkingAgent"
    done = evsys("run", task, "-a", agent, "--jobs-dir", tmp_path / "jobs", "--job-name", "talk")
    assert done.exit_code == 0, done.output
    return tmp_path / "jobs" / "talk"


def evsys(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


@pytest.mark.needs_process
@pytest.mark.needs_sandbox
def test_successful_only_with_no_success_says_the_file_is_empty(failed_job, tmp_path):
    everything = evsys("export", failed_job, "-f", "sft", "-o", tmp_path / "all")
    assert everything.exit_code == 0 and (tmp_path / "all" / "sft.jsonl").read_text()  # positive control
    assert "warning" not in everything.stderr
    out = evsys("export", failed_job, "-f", "sft", "--successful-only", "-o", tmp_path / "ok")
    assert out.exit_code == 0, out.output
    assert (tmp_path / "ok" / "sft.jsonl").read_text() == ""
    assert "sft.jsonl holds no rows (--successful-only: no trial ended without an error" in out.stderr


@pytest.mark.needs_process
@pytest.mark.needs_sandbox
def test_atif_into_a_directory_named_atif_does_not_nest(failed_job, tmp_path):
    assert evsys("export", failed_job, "-f", "atif", "-o", tmp_path / "out").exit_code == 0
    assert [p.name for p in (tmp_path / "out" / "atif").iterdir()] == ["write-ok__TalkingAgent__1.json"]
    assert evsys("export", failed_job, "-f", "atif", "-o", tmp_path / "out2" / "atif").exit_code == 0
    assert [p.name for p in (tmp_path / "out2" / "atif").iterdir()] == ["write-ok__TalkingAgent__1.json"]
