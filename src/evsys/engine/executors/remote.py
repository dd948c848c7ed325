"""The driver's half of an executor whose trials run in other processes (Ray, local worker processes).

A trial whose worker died is submitted again, up to a number of losses, each loss kept in the trial's
`retries` as `worker_lost`; one that never came back is recorded by the driver with its cause, so the job
directory holds exactly one result per trial whatever happened to the workers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from evsys.engine.run import run_trial
from evsys.engine.spec import TrialSpec
from evsys.engine.store import JobStore
from evsys.records import FailureCause, TrialFailure, TrialResult

CANCELLED_MESSAGE = "the job was cancelled while this trial ran; resume reruns it"

Attempt = Callable[[TrialSpec], Awaitable[TrialResult]]


class WorkerLost(Exception):
    """The worker process or node running a trial died before the trial came back."""


async def record_failure(store: JobStore, spec: TrialSpec, cause: FailureCause, message: str) -> TrialResult:
    """A trial that did not come back: its config and a result with `cause`, written by the driver."""
    failed = spec.model_copy(update={"failure": TrialFailure(cause=cause, message=message)})
    return await run_trial(failed, store)


async def run_rescheduled(
    store: JobStore,
    spec: TrialSpec,
    attempt: Attempt,
    *,
    max_losses: int,
    worker: str,
    on_loss: Callable[[], None] = lambda: None,
    record_cancelled: bool = True,
) -> TrialResult:
    """`attempt(spec)` again each time it raises `WorkerLost`, at most `max_losses` times; then the trial
    fails as `worker_lost`. Cancelled meanwhile: the trial is recorded `cancelled` (unless the attempt
    recorded it itself: `record_cancelled=False`) and the cancellation goes on. `worker` names what was lost
    in the retries' messages ("the Ray worker")."""
    losses: list[TrialFailure] = []
    while True:
        current = spec.model_copy(update={"retries": [*spec.retries, *losses]})
        try:
            return await attempt(current)
        except asyncio.CancelledError:
            if record_cancelled:
                await asyncio.shield(
                    record_failure(store, current, FailureCause.CANCELLED, CANCELLED_MESSAGE)
                )
            raise
        except WorkerLost as exc:
            on_loss()
            if len(losses) >= max_losses:
                return await record_failure(store, current, FailureCause.WORKER_LOST, str(exc))
            message = f"{worker} running this trial was lost ({exc}); rescheduled"
            losses.append(TrialFailure(cause=FailureCause.WORKER_LOST, message=message))
