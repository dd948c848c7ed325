"""Harbor dataset directories: `dataset.toml` lists the task directories beside it, and evsys runs those."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evsys.cli.main import app
from evsys.task.harbor_dataset import DatasetManifestError, manifest_kind
from evsys.task.loader import load_tasks
from evsys.task.python import is_python_dataset

runner = CliRunner()

HARBOR_MANIFEST = """\
# A Harbor dataset manifest
schema_version = "1.0"

[dataset]
name = "acme/mini-bench"
version = "1.2"
description = "Two small tasks"
keywords = ["demo"]

[[tasks]]
name = "acme/first"
digest = "sha256:{zero}"

[[tasks]]
name = "acme/second"
digest = "sha256:{zero}"
""".replace("{zero}", "0" * 64)


def _harbor_dataset(root: Path, make_task) -> Path:
    """acme/first (named in task.toml, directory t1), second (by directory name), unlisted (left out)."""
    root.mkdir()
    make_task("t1", parent=root, toml='[task]\nname = "acme/first"\n\n[agent]\ntimeout_sec = 30\n')
    make_task("second", parent=root, toml="[agent]\ntimeout_sec = 30\n")
    make_task("unlisted", parent=root)
    (root / "dataset.toml").write_text(HARBOR_MANIFEST)
    return root


def test_a_harbor_manifest_decides_which_task_directories_load(tmp_path, make_task):
    dataset = _harbor_dataset(tmp_path / "ds", make_task)
    assert manifest_kind(dataset) == "harbor" and not is_python_dataset(dataset)
    taskset = load_tasks(dataset)
    assert sorted(task.path.name for task in taskset.tasks) == ["second", "t1"]
    assert not taskset.errors
    assert taskset.manifest is not None and taskset.manifest.label == "acme/mini-bench@1.2"


def test_a_listed_task_missing_here_is_one_invalid_task_and_the_others_load(tmp_path, make_task):
    dataset = _harbor_dataset(tmp_path / "ds", make_task)
    manifest = HARBOR_MANIFEST + '\n[[tasks]]\nname = "acme/gone"\ndigest = ""\n'
    (dataset / "dataset.toml").write_text(manifest)
    taskset = load_tasks(dataset)
    assert len(taskset.tasks) == 2
    [error] = taskset.errors
    assert "lists 'acme/gone' but no task directory here declares it" in str(error)


def test_a_dataset_toml_of_neither_form_names_both(tmp_path, make_task):
    dataset = tmp_path / "ds"
    dataset.mkdir()
    make_task("a", parent=dataset)
    (dataset / "dataset.toml").write_text('[dataset]\ndescription = "what is this"\n')
    with pytest.raises(DatasetManifestError, match=r"\[dataset\] data.*\[dataset\] name = \"org/name\""):
        manifest_kind(dataset)
    result = runner.invoke(app, ["run", str(dataset), "--jobs-dir", str(tmp_path / "jobs")])
    assert result.exit_code == 2
    assert "not a dataset manifest evsys knows" in result.output
    assert "Field required" not in result.output


@pytest.mark.needs_sandbox
def test_evsys_run_on_a_harbor_dataset_runs_the_listed_tasks(tmp_path, make_task):
    dataset = _harbor_dataset(tmp_path / "ds", make_task)
    jobs = tmp_path / "jobs"
    result = runner.invoke(app, ["run", str(dataset), "--jobs-dir", str(jobs), "--job-name", "j"])
    assert result.exit_code == 0, result.output
    job = json.loads((jobs / "j" / "result.json").read_text())
    assert (job["n_done"], job["mean_reward"]) == (2, 1.0)
    trials = sorted(p.name for p in (jobs / "j").iterdir() if p.is_dir())
    assert trials == ["first__oracle__1", "second__oracle__1"]  # named after the short name, as in Harbor


def test_evsys_python_manifests_still_load_as_python_tasks(tmp_path):
    (tmp_path / "rows.jsonl").write_text('{"id": "r1", "prompt": "say hi", "answer": "hi"}\n')
    (tmp_path / "dataset.toml").write_text('[dataset]\ndata = "rows.jsonl"\nverifier = "exact_match"\n')
    assert manifest_kind(tmp_path) == "python" and is_python_dataset(tmp_path)


def test_tasks_check_follows_the_manifest_as_run_does(tmp_path, make_task):
    dataset = _harbor_dataset(tmp_path / "ds", make_task)
    (dataset / "unlisted" / "task.toml").write_text(
        '[agent]\ntimeout_sec = "abc"\n'
    )  # not listed: not checked
    result = runner.invoke(app, ["tasks", "check", str(dataset)])
    assert result.exit_code == 0, result.output
    assert "unlisted" not in result.output
    assert "2 task(s) checked: 2 ok" in result.output
    (dataset / "dataset.toml").write_text(HARBOR_MANIFEST + '\n[[tasks]]\nname = "acme/gone"\ndigest = ""\n')
    result = runner.invoke(app, ["tasks", "check", str(dataset)])
    assert result.exit_code == 1
    assert f"{dataset}/dataset.toml:tasks: lists 'acme/gone' but no task directory here declares it" in (
        result.output
    )
    assert "3 task(s) checked: 2 ok, 1 with errors" in result.output


def test_tasks_check_names_a_dataset_toml_of_neither_form_in_one_line(tmp_path, make_task):
    dataset = tmp_path / "ds"
    make_task("a", parent=dataset)
    (dataset / "dataset.toml").write_text('[dataset]\ndescription = "what is this"\n')
    result = runner.invoke(app, ["tasks", "check", str(dataset)])
    assert result.exit_code == 2
    assert "not a dataset manifest evsys knows" in result.output and "Traceback" not in result.output
