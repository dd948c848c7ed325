"""The executor seam: a Job runs unchanged on an executor that ships each spec away as JSON and imports the
packed trial back (what a Ray or process-pool executor does), with the same results and files as local."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_tasks import make_task

from evsys.engine import AgentSpec, Job, JobConfig, TrialSpec, run_trial_packed
from evsys.engine.executors import Executor, ExecutorContext, create_executor, register_executor
from evsys.engine.executors.base import EXECUTORS


class ShippingExecutor(Executor):
    """Runs every trial from a JSON copy of its spec in a scratch directory, then imports it (a remote worker
    without the driver's pool, clients or job directory); counts how many trials ran at once."""

    name = "shipping"
    in_flight = 0
    most_in_flight = 0
    shipped: list[str] = []

    async def execute(self, planned) -> object:
        cls = type(self)
        cls.in_flight += 1
        cls.most_in_flight = max(cls.most_in_flight, cls.in_flight)
        try:
            spec = TrialSpec.model_validate_json(planned.spec.model_dump_json())
            cls.shipped.append(spec.trial_name)
            packed = await run_trial_packed(spec)
            await self.ctx.store.import_trial(spec.trial_name, packed.files, packed.result)
            return packed.result
        finally:
            cls.in_flight -= 1


def _files(job_dir: Path) -> set[str]:
    return {
        str(p.relative_to(job_dir)) for p in job_dir.rglob("*") if p.is_file() and p.name != "result.json"
    }


@pytest.fixture
def shipping_executor() -> Iterator[str]:
    """ShippingExecutor registered as `shipping` for one test."""
    register_executor("shipping", ShippingExecutor)
    yield "shipping"
    EXECUTORS.unregister("shipping")


@pytest.mark.needs_sandbox
@pytest.mark.slow
async def test_a_job_on_a_shipping_executor_matches_the_local_executor(tmp_path: Path, shipping_executor):
    dataset = tmp_path / "tasks"
    for name in ("a", "b", "c"):
        make_task(dataset, name)
    make_task(dataset, "zero", test="#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n")
    results = {}
    for executor in ("local", shipping_executor):
        config = JobConfig(
            datasets=[dataset],
            agents=[AgentSpec(name="oracle")],
            jobs_dir=tmp_path / executor,
            job_name="j",
            n_concurrent=2,
            executor={"name": executor},
        )
        result = await Job(config).run()
        results[executor] = ({t.trial_name: (t.reward, t.failure) for t in result.trials}, result)
    local, shipped = results["local"][0], results["shipping"][0]
    assert local == shipped and local["zero__oracle__1"][0] == 0.0 and local["a__oracle__1"][0] == 1.0
    assert sorted(ShippingExecutor.shipped) == sorted(local)
    assert 1 <= ShippingExecutor.most_in_flight <= 2  # the job's n_concurrent bounds the executor
    assert _files(tmp_path / "local" / "j") == _files(tmp_path / "shipping" / "j")
    assert results["shipping"][1].complete


def test_an_unknown_executor_is_refused_with_the_available_ones(tmp_path: Path):
    with pytest.raises(ValueError, match=r"unknown executor 'nope'; available: .*local"):
        create_executor("nope", ExecutorContext(store=None))  # type: ignore[arg-type]
