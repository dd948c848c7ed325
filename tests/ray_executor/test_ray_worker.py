"""The worker half of the Ray executor without a cluster: a task directory is packed the same way every time,
extracted once per node (a second trial of the task finds the copy and fetches nothing), and a trial's spec
is moved onto the node's copy while its config keeps the driver's paths."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_tasks import make_task

from evsys.engine import AgentSpec, JobConfig, TaskRef, TrialSpec
from evsys.engine.config import TrialConfig
from evsys.engine.executors.ray_worker import ShippedTask, materialise, pack_directory, relocate
from evsys.task.python import VerifiedTask


def test_a_task_directory_packs_to_the_same_digest_and_changes_with_its_files(tmp_path: Path):
    task = make_task(tmp_path / "ds", "t")
    digest, data = pack_directory(task)
    assert pack_directory(task) == (digest, data)
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n")
    assert pack_directory(task)[0] != digest


async def test_a_node_extracts_a_shipped_task_once_and_reuses_its_copy(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("EVSYS_CACHE_DIR", str(tmp_path / "cache"))
    task = make_task(tmp_path / "ds", "t")
    digest, data = pack_directory(task)
    fetched: list[str] = []

    async def fetch(ref: str) -> bytes:
        fetched.append(ref)
        return data

    shipped = ShippedTask(root=str(task), digest=digest, blob=["ref-1"])
    first = await materialise(shipped, fetch)
    second = await materialise(shipped, fetch)
    assert first == second == tmp_path / "cache" / "ray-tasks" / digest
    assert fetched == ["ref-1"]  # the second trial of the task fetched nothing
    assert (first / "tests" / "test.sh").read_text() == (task / "tests" / "test.sh").read_text()
    assert [p.name for p in first.parent.iterdir()] == [digest]  # no temp dir left beside it


def _spec(task: TaskRef, root: Path) -> TrialSpec:
    job = JobConfig(datasets=[root], job_name="j", jobs_dir=root)
    config = TrialConfig(
        trial_name="t__oracle__1", task_name="t", task_path=task.path, dataset="ds",
        agent=AgentSpec(name="oracle"), attempt=1,
    )  # fmt: skip
    return TrialSpec.for_job(job, config, task, None)


def test_a_spec_moves_onto_the_nodes_copy_and_keeps_the_drivers_paths_in_its_config(tmp_path: Path):
    driver = tmp_path / "driver" / "ds"
    node = tmp_path / "node" / "abc"
    row = VerifiedTask(id="q", prompt="?", verifier=f"{driver}/verifiers.py:check")
    ref = TaskRef.python(row, driver, imports=[f"{driver}/verifiers.py", "my_pkg.verifiers"])
    moved = relocate(_spec(ref, tmp_path), str(driver), node)
    assert moved.task.path == node
    assert moved.task.imports == [f"{node}/verifiers.py", "my_pkg.verifiers"]
    assert moved.task.python_task.verifier == f"{node}/verifiers.py:check"
    assert moved.config.task_path == driver  # result.json and config.json read as on the driver
    directory = relocate(_spec(TaskRef.directory(driver), tmp_path), str(driver), node)
    assert directory.task.path == node
    sibling = TaskRef.directory(tmp_path / "driver" / "ds-2")  # a path that only starts with the same text
    assert relocate(_spec(sibling, tmp_path), str(driver), node).task.path == sibling.path


@pytest.mark.parametrize("cpus", [1, 2.5])
def test_trial_resources_come_from_the_task(tmp_path: Path, cpus):
    from evsys.engine.executors.ray import MB, trial_resources
    from evsys.engine.plan import plan_trials

    toml = f'[task]\nname = "t"\n[environment]\ncpus = {cpus}\nmemory_mb = 512\n'
    make_task(tmp_path / "ds", "t", toml=toml)
    [planned] = plan_trials(JobConfig(datasets=[tmp_path / "ds"], jobs_dir=tmp_path))
    assert trial_resources(planned) == (float(cpus), 512 * MB)


@pytest.mark.needs_sandbox
async def test_a_worker_stops_its_idle_sandboxes_once_no_trial_ran_for_a_while(tmp_path: Path, monkeypatch):
    import asyncio

    from evsys.engine.executors import ray_worker
    from evsys.sandbox import SandboxError

    monkeypatch.setattr(ray_worker, "IDLE_RELEASE_SEC", 0.5)
    task = make_task(tmp_path / "ds", "t")
    runtime = ray_worker.WorkerRuntime()
    try:
        result, _files, _node = await runtime.run(
            _spec(TaskRef.directory(task), tmp_path).model_dump_json(), None, None
        )
        assert '"reward":1.0' in result.replace(" ", "")
        [pool] = runtime.pools.values()
        idle: list = []
        for _ in range(250):  # the trial's sandbox is reset in the background, then kept for the next trial
            idle = [sb for group in pool.placement.idle._idle.values() for sb in group]
            if idle or not runtime.pools:
                break
            await asyncio.sleep(0.002)
        [sandbox] = idle
        assert await sandbox.exec("true")
        for _ in range(50):
            if not runtime.pools and not runtime._releasing:
                break
            await asyncio.sleep(0.1)
        assert not runtime.pools and pool.idle_count == 0
        with pytest.raises(SandboxError):  # stopped, not left running until Ray recycles the worker process
            await sandbox.exec("true")
    finally:
        await runtime.close()


def test_rays_notice_about_init_from_a_thread_is_dropped_and_other_warnings_kept(caplog):
    import logging

    from evsys.engine.executors.ray import drop_thread_sigterm_notice

    logger = logging.getLogger("ray._private.worker")
    logger.addFilter(drop_thread_sigterm_notice)
    try:
        with caplog.at_level(logging.WARNING, logger="ray._private.worker"):
            logger.warning("SIGTERM handler is not set because current thread is not the main thread.")
            logger.warning("some other Ray warning")  # control: still shown
    finally:
        logger.removeFilter(drop_thread_sigterm_notice)
    assert [r.getMessage() for r in caplog.records] == ["some other Ray warning"]
