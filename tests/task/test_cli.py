"""`evsys tasks check` and `evsys tasks new`, run through the typer app."""

from __future__ import annotations

import os

from typer.testing import CliRunner

from evsys.cli.tasks import tasks_app
from evsys.task import load_task

runner = CliRunner()
# a task Harbor loads too (`[task] name` as org/name, an environment/), so the counts below are evsys's own
PLAIN_IMAGE = "FROM ubuntu:24.04\n"  # runs on the host rootfs: no warning of its own
HARBOR_READY = {"toml": '[task]\nname = "test/{name}"\n', "dockerfile": PLAIN_IMAGE}


def test_check_lists_errors_as_file_field_message_and_exits_1(tmp_path, make_task):
    dataset = tmp_path / "ds"
    make_task("good", parent=dataset, **HARBOR_READY)
    make_task(
        "bad", parent=dataset, toml='[agent]\ntimeout_sec = "abc"\n', test_sh=None, dockerfile=PLAIN_IMAGE
    )
    result = runner.invoke(tasks_app, ["check", str(dataset)])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert f"{dataset}/bad/task.toml:agent.timeout_sec: expected a number, got 'abc'" in lines
    assert f"{dataset}/bad/tests/test.sh: missing (the verifier runs it to write the reward)" in lines
    assert lines[-1] == "2 task(s) checked: 1 ok, 1 with errors; 2 error(s), 0 warning(s)"


def test_check_shows_warnings_but_exits_0(tmp_path, make_task):
    task = make_task(
        "w", toml='[agent]\ntimeout_sec = 5\nflavour = "x"\n', solve_sh=None, dockerfile=PLAIN_IMAGE
    )
    result = runner.invoke(tasks_app, ["check", str(task)])
    assert result.exit_code == 0, result.output
    assert (
        f"{task}/task.toml:agent.flavour: warning: unknown key (kept, but neither evsys nor Harbor uses it)"
        in result.output
    )
    assert (
        f"{task}/solution/solve.sh: warning: missing: the oracle agent needs it "
        "(its trials fail as task_invalid)" in result.output
    )
    assert "1 ok, 0 with errors; 0 error(s), 2 warning(s)" in result.output


def test_check_with_oracle_makes_a_missing_solution_an_error(make_task):
    task = make_task("nosol", solve_sh=None)
    result = runner.invoke(tasks_app, ["check", str(task), "--oracle"])
    assert result.exit_code == 1
    assert (
        f"{task}/solution/solve.sh: missing: the oracle agent needs it (its trials fail as task_invalid)"
        in result.output
    )


def test_check_on_a_missing_path_exits_2_with_a_message(tmp_path):
    result = runner.invoke(tasks_app, ["check", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "does not exist" in result.output


def test_new_scaffolds_a_task_that_check_accepts(tmp_path):
    result = runner.invoke(tasks_app, ["new", "my-task", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    task_dir = tmp_path / "my-task"
    for relative in (
        "instruction.md",
        "task.toml",
        "environment/Dockerfile",
        "tests/test.sh",
        "solution/solve.sh",
    ):
        assert (task_dir / relative).is_file(), relative
    assert os.access(task_dir / "tests" / "test.sh", os.X_OK)
    check = runner.invoke(tasks_app, ["check", str(task_dir), "--oracle"])
    assert check.exit_code == 0, check.output
    assert "0 error(s), 0 warning(s)" in check.output
    task = load_task(task_dir)
    assert task.name == "local/my-task" and task.warnings == []  # Harbor's org/name, the org by default
    assert "# memory_mb = 2048" in (task_dir / "task.toml").read_text()


def test_new_takes_an_org_in_the_name_or_as_an_option(tmp_path):
    assert runner.invoke(tasks_app, ["new", "acme/first", "--dir", str(tmp_path)]).exit_code == 0
    assert runner.invoke(tasks_app, ["new", "second", "--org", "acme", "--dir", str(tmp_path)]).exit_code == 0
    assert load_task(tmp_path / "first").name == "acme/first"
    assert load_task(tmp_path / "second").name == "acme/second"
    result = runner.invoke(tasks_app, ["new", "Acme/third", "--dir", str(tmp_path)])
    assert result.exit_code == 2 and "org 'Acme' must start with" in result.output


def test_check_warns_when_harbor_would_skip_a_task_naming_the_key_or_directory(tmp_path, make_task):
    dataset = tmp_path / "ds"
    make_task("bare-name", parent=dataset, dockerfile=PLAIN_IMAGE)
    make_task("no-env", parent=dataset, toml='[task]\nname = "test/no-env"\n')
    make_task("no-name", parent=dataset, toml='[task]\nversion = "1"\n', dockerfile=PLAIN_IMAGE)
    make_task("empty-env", parent=dataset, toml="", files={"environment/data.txt": "x"})
    make_task("image", parent=dataset, toml='[environment]\ndocker_image = "ubuntu:24.04"\n')
    make_task("fine", parent=dataset, **HARBOR_READY)
    result = runner.invoke(tasks_app, ["check", str(dataset)])
    assert result.exit_code == 0, result.output  # warnings: evsys runs them all
    assert (
        f"{dataset}/bare-name/task.toml:task.name: warning: 'bare-name' is not org/name: Harbor skips this "
        "task (e.g. 'myorg/bare-name'; renamed, evsys still selects it by its short name)"
    ) in result.output
    assert (
        f"{dataset}/no-env/environment: warning: missing: Harbor skips this task (it needs environment/ or "
        "[environment] docker_image)"
    ) in result.output
    assert f"{dataset}/no-name/task.toml:task.name: warning: missing in [task]: Harbor skips" in result.output
    empty = f"{dataset}/empty-env/environment/Dockerfile: warning: missing: Harbor's Docker environment"
    assert f"{empty} cannot start this task" in result.output
    assert "6 task(s) checked: 6 ok, 0 with errors; 0 error(s), 4 warning(s)" in result.output


def test_new_refuses_an_existing_directory_and_bad_names(tmp_path):
    (tmp_path / "taken").mkdir()
    result = runner.invoke(tasks_app, ["new", "taken", "--dir", str(tmp_path)])
    assert result.exit_code == 2 and "already exists" in result.output
    result = runner.invoke(tasks_app, ["new", "Bad Name", "--dir", str(tmp_path)])
    assert result.exit_code == 2 and "task name 'Bad Name' must start with" in result.output
    assert not (tmp_path / "Bad Name").exists()


def test_check_fails_a_test_sh_with_crlf_line_endings(make_task):
    task = make_task("crlf", test_sh="#!/bin/bash\r\necho 1 > /logs/verifier/reward.txt\r\n")
    result = runner.invoke(tasks_app, ["check", str(task)])
    assert result.exit_code == 1, result.output
    assert f"{task}/tests/test.sh: has Windows (CRLF) line endings" in result.output
    clean = make_task("lf", test_sh="#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")  # control
    assert runner.invoke(tasks_app, ["check", str(clean)]).exit_code == 0


def test_strict_makes_misspelt_keys_errors_and_suggests_the_known_one(make_task):
    toml = "[agent]\ntimeout_secs = 5\n[verifer]\ntimeout_sec = 5\n"
    task = make_task("typo", toml=toml, dockerfile=PLAIN_IMAGE)
    lenient = runner.invoke(tasks_app, ["check", str(task)])
    assert lenient.exit_code == 0, lenient.output  # without --strict: warnings
    result = runner.invoke(tasks_app, ["check", "--strict", str(task)])
    assert result.exit_code == 1, result.output
    assert f"{task}/task.toml:agent.timeout_secs: unknown key" in result.output
    assert "did you mean 'agent.timeout_sec'?" in result.output
    assert f"{task}/task.toml:verifer: unknown section" in result.output
    assert "did you mean 'verifier'?" in result.output
    assert "2 error(s), 0 warning(s)" in result.output


def test_check_of_a_path_without_tasks_exits_2(tmp_path):
    assert runner.invoke(tasks_app, ["check", str(tmp_path / "nothing")]).exit_code == 2


def test_check_notes_a_base_the_host_lacks_and_what_evsys_synthesises_in_its_place(make_task, monkeypatch):
    from evsys.task import hostbase

    monkeypatch.setattr(hostbase, "host_facts", lambda: hostbase.HostFacts("debian", "12", "3.11", False))
    task = make_task(dockerfile="FROM python:3.13-slim-bookworm\nWORKDIR /app\n")
    result = runner.invoke(tasks_app, ["check", str(task)])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "note: FROM python:3.13-slim-bookworm needs its image" in out
    assert "python 3.13 built from trixie's source on debian bookworm" in out and "without PGO/LTO" in out
    assert "needs its image" not in out.split("note:")[0]  # how evsys runs the task: no warning of the task


def test_check_notes_a_python_base_the_host_provides_with_the_thin_python_layer(make_task, monkeypatch):
    from evsys.task import hostbase

    facts = hostbase.HostFacts("debian", "12", None, False, layer_pythons=("3.11",))
    monkeypatch.setattr(hostbase, "host_facts", lambda: facts)
    task = make_task(dockerfile="FROM python:3.11-slim-bookworm\nWORKDIR /app\n")
    result = runner.invoke(tasks_app, ["check", str(task)])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "note: python:3.11-slim-bookworm runs on the local backend on host:debian-12+python3.11" in out
    assert "python and pip in a /usr/local of the sandbox's own" in out
    assert "other backends run the image" in out
    assert "needs its image" not in out
    built = make_task(name="built", dockerfile="FROM python:3.11-slim-bookworm\nRUN true\n")
    built_out = runner.invoke(tasks_app, ["check", str(built)]).output
    assert "host:debian-12" not in built_out  # a build on the base: not run on the host
