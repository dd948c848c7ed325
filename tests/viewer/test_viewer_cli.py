"""`evsys jobs list|show|diff`, `evsys trial show`, `evsys view` and `--version` as a user runs them."""

from __future__ import annotations

import json

import pytest
import typer.main
from typer.core import TyperGroup, TyperOption
from typer.testing import CliRunner
from viewer_jobs import HOSTILE

from evsys import __version__
from evsys.cli.main import app


def evsys(*args, columns: int = 200):
    """Run `evsys ARGS` in-process (typer's CliRunner) with a terminal of `columns`; the result has
    returncode, stdout and stderr."""
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    result.returncode = result.exit_code
    return result


def test_version():
    out = evsys("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"evsys {__version__}"


def test_jobs_list_shows_every_job_with_mean_pass_at_k_and_errors(jobs_dir):
    out = evsys("jobs", "list", jobs_dir)
    assert out.returncode == 0, out.stderr
    lines = {line.split()[1]: line for line in out.stdout.splitlines() if line.startswith("│")}
    assert set(lines) == {"oracle-job", "nop-job", "handmade"}
    assert "1.000" in lines["oracle-job"] and "@1 1.000" in lines["oracle-job"]
    assert "0.000" in lines["nop-job"]
    handmade = lines["handmade"]
    assert "loop" in handmade and "local" in handmade and "4/5" in handmade and "0.250" in handmade
    assert handmade.rstrip(" │").endswith("3")  # three failed trials


def test_jobs_list_never_calls_a_job_that_ended_early_done(jobs_dir):
    out = evsys("jobs", "list", jobs_dir)
    lines = {line.split()[1]: line for line in out.stdout.splitlines() if line.startswith("│")}
    assert (
        "incomplete" in lines["handmade"] and "done" not in lines["handmade"]
    )  # result.json: complete false
    assert "done" in lines["oracle-job"] and "cancelled" not in lines["oracle-job"]


def test_jobs_show_prints_summary_and_failed_trials(jobs_dir):
    out = evsys("jobs", "show", jobs_dir / "handmade")
    assert out.returncode == 0, out.stderr
    assert "job handmade" in out.stdout
    assert "agent_error 1, agent_timeout 1, reward_missing 1" in out.stdout
    assert "failed trials (3)" in out.stdout
    failed_table = out.stdout.split("failed trials (3)", 1)[1]
    error_row = next(line for line in failed_table.splitlines() if "greet__loop-local__2" in line)
    assert "agent_error" in error_row and "RuntimeError: the agent broke" in error_row
    assert "greet__loop-local__2/exception.txt" in error_row
    assert "<script>" not in error_row  # only the first line of the message
    assert "running__loop-local__1: no result.json yet" in out.stdout


def test_jobs_show_of_a_real_job_matches_run_summary(jobs_dir):
    out = evsys("jobs", "show", jobs_dir / "oracle-job")
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("│ oracle"))
    assert "1.000" in row and "@1 1.000" in row
    assert "failed trials" not in out.stdout


def test_jobs_show_refuses_a_directory_that_is_not_a_job(tmp_path):
    out = evsys("jobs", "show", tmp_path)
    assert out.returncode == 2
    assert f"{tmp_path} is not a job directory" in out.stderr
    assert "Traceback" not in out.stderr


def test_jobs_diff_prints_per_task_deltas(jobs_dir):
    out = evsys("jobs", "diff", jobs_dir / "oracle-job", jobs_dir / "nop-job")
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if "create-file" in line or "nop-must-fail" in line]
    assert len(rows) == 2
    assert all("oracle -> nop" in r and "1.000 (1)" in r and "-1.000" in r for r in rows)
    assert "2 in both: 0 better, 2 worse, 0 unchanged" in out.stdout
    as_json = evsys("jobs", "diff", jobs_dir / "oracle-job", jobs_dir / "nop-job", "--json")
    assert as_json.returncode == 0, as_json.stderr
    diff = json.loads(as_json.stdout)
    assert (diff["a"], diff["b"]) == ("oracle-job", "nop-job")
    assert sorted((t["task"], t["a"], t["b"], t["delta"]) for t in diff["tasks"]) == [
        ("evsys/create-file", 1.0, 0.0, -1.0),
        ("evsys/nop-must-fail", 1.0, 0.0, -1.0),
    ]


def test_trial_show_tells_the_trial_story(jobs_dir):
    out = evsys("trial", "show", jobs_dir / "handmade/greet__loop-local__2")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "agent_error" in text and "RuntimeError: the agent broke" in text
    assert "→ bash" in text and "echo hi > /app/g" in text and "← exit 0" in text
    assert "reasoning: I should write the file." in text
    assert "prefix break at token 3" in text
    assert "checking greet" in text  # verifier stdout
    assert "Traceback (most recent call last)" in text  # exception.txt
    assert HOSTILE in text  # markup in model output is printed as it is, not interpreted by rich


def test_trial_show_of_a_real_oracle_trial(jobs_dir):
    trial = next((jobs_dir / "oracle-job").glob("create-file__oracle__*"))
    out = evsys("trial", "show", trial)
    assert out.returncode == 0, out.stderr
    assert "reward 1.000" in out.stdout and "ok" in out.stdout
    assert "Create the file `/app/greeting.txt`" in out.stdout  # the instruction step


def test_trial_show_of_a_missing_trial_is_a_clear_error(jobs_dir):
    out = evsys("trial", "show", jobs_dir / "handmade/no-such-trial")
    assert out.returncode == 2 and "no trial directory 'no-such-trial'" in out.stderr


def test_trial_show_of_a_job_directory_points_at_its_trials(jobs_dir, tmp_path):
    out = evsys("trial", "show", jobs_dir / "oracle-job")
    assert out.returncode == 2, out.stdout
    assert "is a job directory: give one of its trials" in out.stderr
    assert "evsys jobs show" in out.stderr and "Field required" not in out.stdout + out.stderr
    other = evsys("trial", "show", tmp_path)
    assert other.returncode == 2 and "is not a trial directory" in other.stderr


def test_trial_show_names_an_unreadable_reward_file(jobs_dir, tmp_path):
    import json
    import shutil

    job = tmp_path / "garbage-job"
    shutil.copytree(jobs_dir / "oracle-job", job, symlinks=True)
    trial = next(job.glob("create-file__oracle__*"))
    (trial / "verifier" / "reward.txt").write_text("not a number\n")
    result = json.loads((trial / "result.json").read_text())
    result.update(rewards=None, reward=None)
    (trial / "result.json").write_text(json.dumps(result))
    out = evsys("trial", "show", trial)
    assert out.returncode == 0, out.stderr
    assert "verifier/reward.txt is unreadable" in out.stdout and "no reward file" not in out.stdout


def test_view_refuses_a_missing_directory(tmp_path):
    out = evsys("view", tmp_path / "nope", "--no-open", "--port", "0")
    assert out.returncode == 2 and "is not a directory" in out.stderr


def _commands(command, path: list[str]):
    if isinstance(command, TyperGroup):
        for name, sub in command.commands.items():
            yield from _commands(sub, [*path, name])
    else:
        yield path, command


ALL_COMMANDS = list(_commands(typer.main.get_command(app), []))
assert len(ALL_COMMANDS) > 10 and all(c.params for _, c in ALL_COMMANDS if _ == ["run"])


@pytest.mark.parametrize("path,command", ALL_COMMANDS, ids=[" ".join(p) for p, _ in ALL_COMMANDS])
def test_every_option_has_help(path, command):
    missing = [p.opts for p in command.params if isinstance(p, TyperOption) and not p.help]
    assert not missing, f"evsys {' '.join(path)}: options without help: {missing}"


@pytest.mark.parametrize("path", [["run"], ["view"], ["jobs", "diff"], ["export"], ["model", "serve"]])
def test_help_fits_80_columns_untruncated(path):
    out = evsys(*path, "--help", columns=80)
    assert out.returncode == 0, out.stderr
    assert all(len(line) <= 80 for line in out.stdout.splitlines())
    assert "…" not in out.stdout
    command = dict((tuple(p), c) for p, c in ALL_COMMANDS)[tuple(path)]
    for param in command.params:
        if isinstance(param, TyperOption):
            for opt in param.opts:
                assert opt in out.stdout, f"{opt} is not shown whole in `evsys {' '.join(path)} --help`"


@pytest.mark.parametrize("group", [[], ["jobs"], ["trial"]])
def test_command_summaries_are_whole_at_80_columns(group):
    out = evsys(*group, "--help", columns=80)
    commands = out.stdout.split("Commands:", 1)[1]
    lines = commands.splitlines()
    # click cuts a summary that does not fit with "..."
    assert all(len(line) <= 80 and not line.endswith("...") for line in lines), commands


def test_sft_export_leaves_out_oracle_trials_with_no_model_turn(jobs_dir, tmp_path):
    from evsys.trajectory.export import export_job

    [path] = export_job(jobs_dir / "oracle-job", "sft", tmp_path / "sft", successful_only=True)
    assert path.read_text() == ""  # every oracle trial succeeded, none has an assistant message to learn


def test_jobs_list_json(jobs_dir):
    import json

    out = evsys("jobs", "list", jobs_dir, "--json")
    assert out.returncode == 0, out.stderr
    jobs = {job["name"]: job for job in json.loads(out.stdout)["jobs"]}
    assert set(jobs) == {"oracle-job", "nop-job", "handmade"}
    assert jobs["oracle-job"]["mean_reward"] == 1.0 and jobs["oracle-job"]["state"] == "done"
    assert jobs["handmade"]["n_errors"] == 3 and jobs["handmade"]["state"] == "incomplete"


def test_jobs_show_groups_errors_by_message_and_has_json(jobs_dir):
    import json

    out = evsys("jobs", "show", jobs_dir / "handmade")
    assert "errors by message" in out.stdout
    data = json.loads(evsys("jobs", "show", jobs_dir / "handmade", "--json").stdout)
    assert data["n_errors"] == 3 and data["state"] == "incomplete"
    assert sorted(g["cause"] for g in data["errors"]) == ["agent_error", "agent_timeout", "reward_missing"]
    assert all(g["count"] == 1 and len(g["trials"]) == 1 for g in data["errors"])
    assert {t["cause"] for t in data["failed_trials"]} == {"agent_error", "agent_timeout", "reward_missing"}
    assert [p["name"] for p in data["pending"]] == ["running__loop-local__1"]


def test_error_summary_groups_by_cause_and_first_line():
    from evsys.records import FailureCause, TrialFailure, TrialResult
    from evsys.viewer.jobdata import error_summary

    def failed(name: str, cause: FailureCause, message: str) -> TrialResult:
        failure = TrialFailure(cause=cause, message=message)
        return TrialResult(
            trial_name=name,
            task_name=name,
            task_path="/t",
            dataset="d",
            agent="a",
            attempt=1,
            failure=failure,
        )

    trials = [
        failed("t1", FailureCause.AGENT_TIMEOUT, "ran past 60 s"),
        failed("t2", FailureCause.AGENT_TIMEOUT, "ran past 60 s"),
        failed("t3", FailureCause.AGENT_ERROR, "ValueError: boom\nTraceback ..."),
        failed("t4", FailureCause.AGENT_ERROR, "ValueError: other"),
    ]
    groups = error_summary(trials)
    assert [(g.cause, g.message, g.count) for g in groups] == [
        ("agent_timeout", "ran past 60 s", 2),
        ("agent_error", "ValueError: boom", 1),
        ("agent_error", "ValueError: other", 1),
    ]
    assert groups[0].trials == ["t1", "t2"]


def test_trial_show_json(jobs_dir):
    import json

    trial = next((jobs_dir / "oracle-job").glob("create-file__oracle__*"))
    data = json.loads(evsys("trial", "show", trial, "--json").stdout)
    assert data["result"]["reward"] == 1.0 and data["name"] == trial.name
    assert data["trajectory"]["steps"] and data["problems"] == []
