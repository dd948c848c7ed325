"""`LocalExecutor`: trials run as asyncio tasks in the driver's process, writing the job directory."""

from __future__ import annotations

from evsys.engine.executors.base import Executor
from evsys.engine.run import run_trial
from evsys.engine.spec import PlannedTrial
from evsys.records import TrialResult


class LocalExecutor(Executor):
    """In-process trials sharing the job's sandbox pool and model clients."""

    name = "local"
    in_process = True

    async def execute(self, planned: PlannedTrial) -> TrialResult:
        """`run_trial` with the job's store and live resources."""
        return await run_trial(planned.spec, self.ctx.store, self.ctx.resources(planned))
