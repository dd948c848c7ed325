"""Integrity findings as a user sees them: `evsys jobs show` (a findings column and a table of the trials with
findings), its `--json`, and `evsys trial show`, over a job whose results were written through `JobStore`."""

from __future__ import annotations

import json
from pathlib import Path

from test_viewer_cli import evsys

from evsys.engine import JobConfig, JobStore
from evsys.engine.metrics import compute_metrics
from evsys.records import IntegrityFinding, JobResult, TrialResult
from stored_trials import write_finished

FINDINGS = [
    IntegrityFinding(kind="verifier_place_written", evidence="/logs/verifier/reward.txt", source="verifier"),
    IntegrityFinding(kind="change_dropped", evidence="tests/conftest.py", source="repo.change"),
]


def _result(name: str, reward: float, findings: list[IntegrityFinding]) -> TrialResult:
    return TrialResult(
        trial_name=name, task_name="calc", task_path="/t/calc", dataset="rows", agent="loop",
        attempt=int(name[-1]), reward=reward, rewards={"reward": reward}, integrity=findings,
    )  # fmt: skip


async def _job(tmp_path: Path) -> Path:
    """A job of two trials written as the engine writes them: an honest 1 and a hacked 0 with findings."""
    config = JobConfig(datasets=[tmp_path], jobs_dir=tmp_path / "jobs", job_name="hacked", n_attempts=2)
    store = JobStore(config.job_dir)
    await store.write_config(config)
    trials = [_result("calc__1", 1.0, []), _result("calc__2", 0.0, FINDINGS)]
    for trial in trials:
        await store.reset_trial_dir(trial.trial_name)
        await write_finished(store, trial)
    metrics = compute_metrics(trials, 2)
    await store.write_job_result(JobResult(job_name="hacked", job_dir=str(config.job_dir), metrics=metrics))
    return config.job_dir


async def test_jobs_show_counts_and_lists_the_trials_with_findings(tmp_path):
    job_dir = await _job(tmp_path)
    out = evsys("jobs", "show", job_dir)
    assert out.returncode == 0, out.stderr
    assert "1 (change_dropped 1, verifier_place_written 1)" in out.stdout  # the summary's findings column
    assert "trials with integrity findings (1)" in out.stdout
    table = out.stdout.split("trials with integrity findings")[1]
    assert "calc__2" in table and "calc__1" not in table
    assert "verifier_place_written: /logs/verifier/reward.txt" in table
    assert "change_dropped: tests/conftest.py" in table


async def test_jobs_show_json_carries_the_counts_and_the_findings(tmp_path):
    data = json.loads(evsys("jobs", "show", await _job(tmp_path), "--json").stdout)
    assert data["n_with_findings"] == 1
    [group] = data["metrics"]
    assert group["n_with_findings"] == 1
    assert group["findings_by_kind"] == {"change_dropped": 1, "verifier_place_written": 1}
    [flagged] = data["integrity_trials"]
    assert flagged["trial"] == "calc__2" and flagged["reward"] == 0.0
    assert flagged["findings"] == [f.model_dump(mode="json") for f in FINDINGS]


async def test_trial_show_lists_each_finding(tmp_path):
    job_dir = await _job(tmp_path)
    out = evsys("trial", "show", job_dir / "calc__2")
    assert out.returncode == 0, out.stderr
    assert "integrity findings (2)" in out.stdout
    assert "verifier_place_written: /logs/verifier/reward.txt (verifier)" in out.stdout
    assert "change_dropped: tests/conftest.py (repo.change)" in out.stdout
    honest = evsys("trial", "show", job_dir / "calc__1")
    assert "integrity findings" not in honest.stdout
    shown = json.loads(evsys("trial", "show", job_dir / "calc__2", "--json").stdout)
    assert shown["result"]["integrity"] == [f.model_dump(mode="json") for f in FINDINGS]
