"""A job's warm pool (`JobConfig.warm_sandboxes`, `evsys run --warm-sandboxes`): its trials run on the pool's
sandboxes, and when the job ends or is cancelled every sandbox of the pool is stopped, nothing left running
or mounted."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from evsys.engine import Job, JobConfig
from evsys.sandbox.local.cgroups import detect_layout


def sandboxes_of_this_process() -> set[str]:
    """The cgroups of this process's sandboxes (one per running sandbox; gone once it is stopped)."""
    names: set[str] = set()
    for parent in detect_layout().parents.values():
        names |= {p.name for p in parent.glob(f"evsys-{os.getpid()}-*")}
    return names


def sandbox_processes() -> list[int]:
    """Live processes in a cgroup of this process's sandboxes (their mounts live and die with them)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            inside = f"/evsys-{os.getpid()}-" in (entry / "cgroup").read_text()
            alive = "\nState:\tZ" not in (entry / "status").read_text()
        except OSError:
            continue
        if inside and alive:
            found.append(int(entry.name))
    return found


def config(dataset: Path, **kw) -> JobConfig:
    return JobConfig(datasets=[dataset], jobs_dir=dataset.parent / "jobs", job_name="warm", **kw)


@pytest.mark.needs_sandbox
async def test_cancelling_a_job_stops_its_warm_pool(task_factory, eventually):
    for name in ("a", "b", "c", "d"):
        task_factory(name, solve="#!/bin/bash\nsleep 120\n")
    before = sandboxes_of_this_process()
    job = Job(config(task_factory.dataset, n_concurrent=2, warm_sandboxes=3))
    run = asyncio.create_task(job.run())
    # two trials' sandboxes and three warm ones (positive control: the pool really holds started sandboxes)
    started = lambda: len(sandboxes_of_this_process() - before) >= 5  # noqa: E731
    await eventually(started, "trials and warm sandboxes running")
    assert sandbox_processes()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert sandboxes_of_this_process() - before == set()
    assert sandbox_processes() == []


@pytest.mark.needs_sandbox
async def test_a_job_with_a_warm_pool_finishes_its_trials_and_stops_the_pool(task_factory):
    for name in ("a", "b", "c", "d", "e"):
        task_factory(name)
    before = sandboxes_of_this_process()
    result = await Job(config(task_factory.dataset, n_concurrent=2, warm_sandboxes=2)).run()
    assert [t.reward for t in result.trials] == [1.0] * 5
    assert sandboxes_of_this_process() - before == set()
