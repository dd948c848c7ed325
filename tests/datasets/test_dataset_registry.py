"""Datasets by name: a Harbor-format registry.json pointing at local git repositories, fetched at the pinned
commits into the cache, run with `evsys run -d NAME@VERSION`, and offline once cached."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evsys.cli.main import app
from evsys.datasets import DatasetCache, RegistryError
from evsys.datasets.registry import newest_version, parse_registry, read_registry_file

runner = CliRunner()
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, env={**os.environ, **GIT_ENV}, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _write_task(root: Path, name: str, reward: int) -> None:
    task = root / "tasks" / name
    (task / "tests").mkdir(parents=True, exist_ok=True)
    (task / "solution").mkdir(exist_ok=True)
    (task / "instruction.md").write_text(f"Task {name}.\n")
    (task / "task.toml").write_text("[agent]\ntimeout_sec = 30\n")
    (task / "tests" / "test.sh").write_text(f"#!/bin/bash\necho {reward} > /logs/verifier/reward.txt\n")
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    for script in (task / "tests" / "test.sh", task / "solution" / "solve.sh"):
        script.chmod(0o755)


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, list[str]]:
    """A git repository with two commits of two tasks (v1: both pass with the oracle; v2: `beta` scores 0),
    and a registry listing mini@1.0 and mini@2.0 pinned to them."""
    monkeypatch.setenv("EVSYS_CACHE_DIR", str(tmp_path / "cache"))
    repo = tmp_path / "bench-repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _write_task(repo, "alpha", 1)
    _write_task(repo, "beta", 1)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "v1")
    first = _git(repo, "rev-parse", "HEAD")
    _write_task(repo, "beta", 0)
    _git(repo, "commit", "-qam", "v2")
    second = _git(repo, "rev-parse", "HEAD")

    def version(number: str, commit: str) -> dict:
        tasks = [
            {"name": n, "git_url": str(repo), "git_commit_id": commit, "path": f"tasks/{n}"}
            for n in ("alpha", "beta")
        ]
        return {"name": "mini", "version": number, "description": f"mini {number}", "tasks": tasks}

    path = tmp_path / "registry.json"
    path.write_text(json.dumps([version("1.0", first), version("2.0", second)]))
    return path, repo, [first, second]


def _run(tmp_path: Path, registry_file: Path, reference: str, name: str) -> dict:
    args = [
        "run",
        "-d",
        reference,
        "--registry-path",
        str(registry_file),
        "--jobs-dir",
        str(tmp_path / "jobs"),
    ]
    result = runner.invoke(app, [*args, "--job-name", name])
    assert result.exit_code == 0, result.output
    return json.loads((tmp_path / "jobs" / name / "result.json").read_text())


@pytest.mark.needs_sandbox
def test_run_by_name_uses_the_pinned_commit_of_each_version(tmp_path, registry):
    registry_file, _, _ = registry
    assert _run(tmp_path, registry_file, "mini@1.0", "v1")["mean_reward"] == 1.0
    assert _run(tmp_path, registry_file, "mini@2.0", "v2")["mean_reward"] == 0.5
    assert _run(tmp_path, registry_file, "mini", "newest")["mean_reward"] == 0.5  # bare name: newest version


@pytest.mark.needs_sandbox
def test_a_fetched_dataset_is_recorded_and_runs_offline(tmp_path, registry):
    registry_file, repo, commits = registry
    dataset = read_registry_file(registry_file).find("mini@1.0")
    result = runner.invoke(app, ["datasets", "download", "mini@1.0", "--registry-path", str(registry_file)])
    assert result.exit_code == 0, result.output
    path = Path(result.stdout.strip().splitlines()[-1])
    assert sorted(p.name for p in path.iterdir() if p.is_dir()) == ["alpha", "beta"]
    record = DatasetCache().record(dataset)
    assert record is not None and {t.commit for t in record.tasks} == {commits[0]}
    shutil.rmtree(repo)  # the source is gone: and the repository mirror too, so no git could serve it
    shutil.rmtree(tmp_path / "cache" / "repos")
    assert _run(tmp_path, registry_file, "mini@1.0", "offline")["mean_reward"] == 1.0
    listing = runner.invoke(app, ["datasets", "list", "--registry-path", str(registry_file)])
    assert "mini@1.0" in listing.output and "mini@2.0" in listing.output and "yes" in listing.output


def test_a_commit_not_in_the_repository_is_refused(tmp_path, registry):
    registry_file, _, _ = registry
    rows = json.loads(registry_file.read_text())
    rows[0]["tasks"][0]["git_commit_id"] = "0" * 40
    registry_file.write_text(json.dumps(rows))
    result = runner.invoke(app, ["run", "-d", "mini@1.0", "--registry-path", str(registry_file)])
    assert result.exit_code == 2
    assert "is not in" in result.output and "0000000000" in result.output
    assert not (tmp_path / "cache" / "datasets" / "mini@1.0").exists()  # nothing half-written


def test_unknown_names_and_versions_say_what_the_registry_has(tmp_path, registry):
    registry_file, _, _ = registry
    result = runner.invoke(app, ["run", "-d", "nope@1", "--registry-path", str(registry_file)])
    assert result.exit_code == 2 and "no dataset 'nope'" in result.output and "mini" in result.output
    result = runner.invoke(app, ["datasets", "download", "mini@9", "--registry-path", str(registry_file)])
    assert result.exit_code == 2 and "versions: 1.0, 2.0" in result.output


def test_registry_entries_are_validated():
    with pytest.raises(RegistryError, match=r"0.tasks.0.name"):
        parse_registry(
            json.dumps([{"name": "x", "version": "1", "tasks": [{"name": "../up", "path": "a"}]}]), "r"
        )
    with pytest.raises(RegistryError, match="not JSON"):
        parse_registry("{", "r")
    assert newest_version(["1.0", "2.0", "10.0"]) == "10.0"
    assert newest_version(["2.0", "head"]) == "head"
