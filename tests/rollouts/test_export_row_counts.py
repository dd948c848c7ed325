"""`evsys export` says how many rows it wrote, and for an export of none, why: never "wrote 1 file(s)" for a
file that holds nothing. The job directories are written by hand (no sandbox, no model)."""

from __future__ import annotations

from pathlib import Path

import pytest
from handmade_jobs import make_job_dir, write_trial
from typer.testing import CliRunner

from evsys.cli.main import app
from evsys.records import FailureCause, TrialFailure


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A job of two finished trials: one wrong answer (reward 0), one errored."""
    job_dir = make_job_dir(tmp_path / "job")
    write_trial(job_dir, "q__1", 0.0, answer="41")
    failure = TrialFailure(cause=FailureCause.AGENT_ERROR, message="boom")
    write_trial(job_dir, "q__2", None, answer="42", failure=failure.model_dump())
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
    job_dir = make_job_dir(tmp_path / "empty")
    out = evsys("export", job_dir, "-f", "atif", "-o", tmp_path / "a")
    assert out.exit_code == 0, out.output
    assert "wrote 0 trajectory copies from 0 trial(s)" in out.stdout
    assert "the job has no finished trial" in out.stderr
