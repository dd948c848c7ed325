"""`evsys jobs show|list` and `evsys trial show` on what a job directory really holds: a result.json that
cannot be read is said (naming the file), and the job's wall time is the one figure `evsys run` writes."""

from __future__ import annotations

import json

from typer.testing import CliRunner
from viewer_jobs import make_handmade_job

from evsys.cli.main import app


def evsys(*args):
    """`evsys ARGS` in-process, 200 columns wide."""
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def test_a_corrupt_job_result_json_is_named_by_jobs_show_and_list(tmp_path):
    job = make_handmade_job(tmp_path)
    (job / "result.json").write_text('{"job_name": "hand')  # what a full disk leaves
    shown = evsys("jobs", "show", job)
    assert shown.exit_code == 0, shown.output
    assert f"{job}/result.json: cannot be read" in shown.output
    data = json.loads(evsys("jobs", "show", job, "--json").output)
    assert data["state"] == "unreadable" and data["result_error"].startswith(
        f"{job}/result.json: cannot be read"
    )
    listing = json.loads(evsys("jobs", "list", tmp_path, "--json").output)["jobs"][0]
    assert listing["state"] == "unreadable" and "result.json: cannot be read" in listing["problem"]


def test_a_corrupt_trial_result_json_is_named_by_jobs_show_and_trial_show(tmp_path):
    job = make_handmade_job(tmp_path)
    trial = job / "count__loop-local__1"
    (trial / "result.json").write_text("[1, 2")
    shown = evsys("jobs", "show", job)
    assert "count__loop-local__1: count__loop-local__1/result.json: cannot be read" in shown.output
    out = evsys("trial", "show", trial)
    assert out.exit_code == 0, out.output
    assert "count__loop-local__1: count__loop-local__1/result.json:" in out.output
    assert "no result.json yet" not in out.output
    (trial / "result.json").unlink()  # a trial still running says so
    assert "count__loop-local__1: no result.json yet" in evsys("trial", "show", trial).output


def test_jobs_show_json_gives_the_wall_time_the_summary_table_shows(tmp_path):
    job = make_handmade_job(tmp_path)  # four trials, each from 01:00:01 to 01:00:05
    data = json.loads(evsys("jobs", "show", job, "--json").output)
    assert data["wall_time_sec"] == data["metrics"][0]["wall_time_sec"] == 4.0
