"""Finished trials written into a job directory the way a trial writes them (`JobStore.finish_trial`: the
trajectory, then result.json), for tests that need trials on disk without running them."""

from __future__ import annotations

from evsys.engine import JobStore
from evsys.records import AgentInfo, Trajectory, TrajectoryRecorder, TrialResult


def trajectory_of(result: TrialResult, *messages: str) -> Trajectory:
    """A trajectory of `result`'s trial: one agent step per message (none: an empty one)."""
    recorder = TrajectoryRecorder(result.trial_name, AgentInfo(name=result.agent))
    for message in messages:
        recorder.add("agent", message)
    return recorder.build()


async def write_finished(store: JobStore, result: TrialResult, trajectory: Trajectory | None = None) -> None:
    """Write `result` (and `trajectory`, or an empty one) as its trial's files."""
    await store.finish_trial(trajectory or trajectory_of(result), result)
