"""`evsys export` says how many rows it wrote, and for an export of none, why: never "wrote 1 file(s)" for a
file that holds nothing. The job directories are written by hand (no sandbox, no model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evsys.cli.main import app
from evsys.records import AgentInfo, FailureCause, TrialFailure, TrialResult
from evsys.records.trajectory import TrajectoryRecorder


def write_trial(job_dir: Path, name: str, reward: float | None, *, error: bool = False, text: str = "42"):
    """One finished trial of task `q` with a trajectory whose model answered `text`."""
    trial = job_dir / name
    trial.mkdir(parents=True)
    failure = TrialFailure(cause=FailureCause.AGENT_ERROR, message="boom") if error else None
    result = TrialResult(
        trial_name=name,
        task_name="q",
        task_path="/q",
        dataset="d",
        agent="loop",
        attempt=1,
        reward=reward,
        rewards=None if reward is None else {"reward": reward},
        failure=failure,
    )
    (trial / "result.json").write_text(result.model_dump_json())
    recorder = TrajectoryRecorder(name, AgentInfo(name="loop"))
    recorder.add("user", "What is 6*7?")
    recorder.add("agent", text)
    (trial / "trajectory.json").write_text(recorder.build().model_dump_json())


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A job of two finished trials: one wrong answer (reward 0), one errored."""
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "config.json").write_text("{}")
    write_trial(job_dir, "q__1", 0.0, text="41")
    write_trial(job_dir, "q__2", None, error=True)
    return job_dir


def evsys(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def test_export_says_how_many_rows_it_wrote(job: Path, tmp_path: Path):
    out = evsys("export", job, "-f", "rl", "-o", tmp_path / "rl")
    assert out.exit_code == 0, out.output
    assert len((tmp_path / "rl" / "rl.jsonl").read_text().splitlines()) == 2
    assert f"wrote 2 row(s) from 2 trial(s) to {tmp_path / 'rl' / 'rl.jsonl'}" in out.stdout
    assert "file(s)" not in out.stdout and "warning" not in out.stderr


def test_an_export_of_no_rows_says_so_and_why(job: Path, tmp_path: Path):
    everything = evsys("export", job, "-f", "sft", "-o", tmp_path / "all")
    assert "wrote 2 row(s) from 2 trial(s)" in everything.stdout  # positive control: no filter
    out = evsys("export", job, "-f", "sft", "--successful-only", "-o", tmp_path / "ok")
    assert out.exit_code == 0, out.output
    assert (tmp_path / "ok" / "sft.jsonl").read_text() == ""
    assert "wrote 0 row(s) from 2 trial(s)" in out.stdout
    assert "holds no rows (--successful-only: no trial ended without an error and with reward >= 1)" in (
        out.stderr
    )


def test_an_empty_job_exports_no_rows_naming_the_reason(tmp_path: Path):
    job_dir = tmp_path / "empty"
    job_dir.mkdir()
    (job_dir / "config.json").write_text(json.dumps({}))
    out = evsys("export", job_dir, "-f", "atif", "-o", tmp_path / "a")
    assert out.exit_code == 0, out.output
    assert "wrote 0 trajectory copies from 0 trial(s)" in out.stdout
    assert "the job has no finished trial" in out.stderr
