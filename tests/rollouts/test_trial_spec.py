"""`TrialSpec` is data, and `run_trial` gives the same trial in a spawned process as in this one."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from evsys.engine import AgentSpec, JobConfig, JobStore, TaskRef, TrialSpec, run_trial, run_trial_sync
from evsys.engine.config import TrialConfig
from evsys.task.python import VerifiedTask

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_TASK = REPO / "examples" / "tasks" / "create-file"


def _spec(tmp_path: Path, task: TaskRef, agent: AgentSpec, name: str) -> TrialSpec:
    job = JobConfig(datasets=[tmp_path], job_name="spec", jobs_dir=tmp_path)
    config = TrialConfig(
        trial_name=name,
        task_name=name,
        task_path=task.path,
        dataset="ds",
        agent=agent,
        attempt=1,
        agent_timeout_sec=120,
        verifier_timeout_sec=120,
    )
    return TrialSpec.for_job(job, config, task, None)


def _python_spec(tmp_path: Path, model: str) -> TrialSpec:
    task = VerifiedTask(id="sum", prompt="What is 19+23?", verifier="rollout_agents:says_42", data={"n": 1})
    agent = AgentSpec(name="loop", model=model, kwargs={"max_tokens": 8, "temperature": 0})
    return _spec(tmp_path, TaskRef.python(task, tmp_path), agent, "sum")


def test_a_trial_spec_round_trips_through_json_and_pickle(tmp_path: Path):
    for spec in (
        _spec(tmp_path, TaskRef.directory(EXAMPLE_TASK), AgentSpec(name="oracle"), "create-file"),
        _python_spec(tmp_path, "vllm:Qwen/Qwen3-8B"),
    ):
        assert TrialSpec.model_validate_json(spec.model_dump_json()) == spec
        assert pickle.loads(pickle.dumps(spec)) == spec
    assert json.loads(spec.model_dump_json())["task"]["python_task"]["verifier"] == "rollout_agents:says_42"


async def _in_process_and_spawned(spec: TrialSpec, tmp_path: Path) -> tuple[JobStore, JobStore]:
    local = JobStore(tmp_path / "local")
    await run_trial(spec, local)
    remote = JobStore(tmp_path / "remote")
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        packed = await asyncio.get_running_loop().run_in_executor(
            pool, run_trial_sync, spec.model_dump(mode="json")
        )
    await remote.import_trial(spec.trial_name, packed.files, packed.result)
    return local, remote


def _files(store: JobStore, name: str) -> set[str]:
    root = store.trial_dir(name)
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _same_outcome(local: JobStore, remote: JobStore, name: str) -> dict:
    a, b = local.read_trial_result(name), remote.read_trial_result(name)
    assert a is not None and b is not None
    assert (a.reward, a.rewards, a.failure) == (b.reward, b.rewards, b.failure)
    assert _files(local, name) == _files(remote, name)
    return a.model_dump()


@pytest.mark.needs_sandbox
@pytest.mark.slow
async def test_run_trial_in_a_spawned_process_matches_in_process_for_an_example_task(tmp_path: Path):
    spec = _spec(tmp_path, TaskRef.directory(EXAMPLE_TASK), AgentSpec(name="oracle"), "create-file")
    local, remote = await _in_process_and_spawned(spec, tmp_path)
    result = _same_outcome(local, remote, "create-file")
    assert result["reward"] == 1.0
    assert (remote.trial_dir("create-file") / "verifier" / "test-stdout.txt").is_file()


@pytest.mark.slow
async def test_run_trial_in_a_spawned_process_matches_in_process_for_a_python_task(
    tmp_path: Path, math_model_dir: Path
):
    spec = _python_spec(tmp_path, f"local:{math_model_dir}")
    local, remote = await _in_process_and_spawned(spec, tmp_path)
    result = _same_outcome(local, remote, "sum")
    assert result["failure"] is None
    trajectories = [
        json.loads((s.trial_dir("sum") / "trajectory.json").read_text())["steps"][-1]["message"]
        for s in (local, remote)
    ]
    assert trajectories[0] == trajectories[1]
