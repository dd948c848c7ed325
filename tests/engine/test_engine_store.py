"""JobStore: atomic JSON files, reading back for resume, clear errors for a bad job directory."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from evsys.engine import AgentSpec, JobConfig, JobStore, JobStoreError, TrialConfig, read_job_config
from evsys.records import AgentInfo, FailureCause, Trajectory, TrajectoryRecorder, TrialFailure, TrialResult
from stored_trials import write_finished


def result(name: str, cause: FailureCause | None = None) -> TrialResult:
    failure = TrialFailure(cause=cause, message="m") if cause else None
    return TrialResult(
        trial_name=name,
        task_name="t",
        task_path="/t",
        dataset="d",
        agent="oracle",
        attempt=1,
        failure=failure,
    )


async def test_resume_skips_only_valid_non_cancelled_results(tmp_path):
    store = JobStore(tmp_path / "job")
    for name, cause in [("ok", None), ("err", FailureCause.AGENT_ERROR), ("cancel", FailureCause.CANCELLED)]:
        await store.reset_trial_dir(name)
        await write_finished(store, result(name, cause))
    await store.reset_trial_dir("truncated")
    (store.trial_dir("truncated") / "result.json").write_text('{"trial_name": "trunc')
    names = ["ok", "err", "cancel", "truncated", "never-started"]
    assert sorted(store.finished_results(names)) == ["err", "ok"]
    assert sorted(store.finished_results(names, retry_errors=True)) == ["ok"]


async def test_reset_trial_dir_wipes_leftovers(tmp_path):
    store = JobStore(tmp_path / "job")
    path = await store.reset_trial_dir("t")
    (path / "agent" / "half.log").write_text("partial")
    path = await store.reset_trial_dir("t")
    assert sorted(p.name for p in path.iterdir()) == ["agent", "artifacts", "verifier"]
    assert list((path / "agent").iterdir()) == []


async def test_config_round_trip_and_errors(tmp_path):
    config = JobConfig(datasets=[tmp_path], jobs_dir=tmp_path / "jobs", job_name="j1", n_attempts=3)
    store = JobStore(config.job_dir)
    await store.write_config(config)
    assert read_job_config(config.job_dir) == config
    assert not list(config.job_dir.glob(".*.tmp"))  # temp files renamed away
    with pytest.raises(JobStoreError, match=r"config\.json does not exist: is .* a job directory"):
        read_job_config(tmp_path / "nope")
    (config.job_dir / "config.json").write_text('{"datasets": [], "n_attempts": "x"}')
    with pytest.raises(JobStoreError, match=r"config\.json:datasets: "):
        read_job_config(config.job_dir)


def test_job_name_must_be_file_safe(tmp_path):
    with pytest.raises(ValueError, match="is not a usable job name"):
        JobConfig(datasets=[tmp_path], job_name="../escape")


def _trajectory(name: str, message: str) -> Trajectory:
    recorder = TrajectoryRecorder(name, AgentInfo(name="oracle"))
    recorder.add("agent", message)
    return recorder.build()


def _packed(path: Path, trajectory: Trajectory) -> bytes:
    """A worker's trial dir as the tar `import_trial` takes."""
    path.mkdir(parents=True)
    (path / "trajectory.json").write_text(trajectory.model_dump_json())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(path, arcname=".")
    return buf.getvalue()


async def test_a_store_that_keeps_trajectories_hands_them_back_without_the_files(tmp_path):
    store = JobStore(tmp_path / "job", keep_trajectories=True)
    await store.reset_trial_dir("here")
    await write_finished(store, result("here"), _trajectory("here", "written here"))
    files = _packed(tmp_path / "worker" / "away", _trajectory("away", "run away"))
    await store.import_trial("away", files, result("away"))
    for name in ("here", "away"):
        (store.trial_dir(name) / "trajectory.json").unlink()  # what is handed back never came from disk
    assert store.trajectory("here").steps[0].message == "written here"
    assert store.trajectory("away").steps[0].message == "run away"
    plain = JobStore(tmp_path / "job")  # by default nothing is kept: a trial's file is read
    assert plain.trajectory("here") is None


async def test_a_trial_starts_in_a_fresh_dir_and_finishes_with_its_result_last(tmp_path):
    store = JobStore(tmp_path / "deep" / "job", keep_trajectories=True)
    config = TrialConfig(
        trial_name="t",
        task_name="t",
        task_path=tmp_path,
        dataset="d",
        agent=AgentSpec(name="oracle"),
        attempt=1,
    )
    path = await store.start_trial(config)
    (path / "agent" / "half.log").write_text("partial")
    (path / "result.json").write_text("{}")
    path = await store.start_trial(config)  # a rerun wipes what the earlier run left
    assert sorted(p.name for p in path.iterdir()) == ["agent", "artifacts", "config.json", "verifier"]
    assert TrialConfig.model_validate_json((path / "config.json").read_text()) == config
    finished = result("t")
    await store.finish_trial(_trajectory("t", "done"), finished)
    assert store.read_trial_result("t") == finished
    assert store.trajectory("t") is not None and (path / "trajectory.json").is_file()
    assert not list(path.glob(".*.tmp"))  # temp files renamed away
    assert oct((path / "result.json").stat().st_mode & 0o777) == oct(0o644)


def test_an_atomic_write_waits_for_a_free_descriptor_and_makes_missing_directories(tmp_path, monkeypatch):
    import errno
    import os

    from evsys.util import atomic

    real_open, refused = os.open, []

    def open_after_two_refusals(path, flags, mode=0o777):
        if len(refused) < 2:  # the process is out of descriptors twice, then one comes free
            refused.append(path)
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, flags, mode)

    monkeypatch.setattr(atomic, "EMFILE_RETRY_DELAYS", (0.0, 0.0, 0.0))
    monkeypatch.setattr(os, "open", open_after_two_refusals)
    target = tmp_path / "a" / "b" / "result.json"
    atomic.write_json_atomic(target, {"reward": 1.0})
    assert len(refused) == 2 and target.read_text() == '{\n  "reward": 1.0\n}\n'
    assert [p.name for p in target.parent.iterdir()] == ["result.json"]  # no temp file left
    refused.clear()
    monkeypatch.setattr(atomic, "EMFILE_RETRY_DELAYS", (0.0,))
    with pytest.raises(OSError, match="Too many open files"):  # past the retries: the error stands
        atomic.write_json_atomic(target, {"reward": 0.0})
    assert target.read_text() == '{\n  "reward": 1.0\n}\n'
