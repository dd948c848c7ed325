"""`stream_rollouts`: each task's group of samples reaches the trainer as soon as it is scored, while the
trainer may load new weights meanwhile (async RL: sampling overlaps training).

```python
client = LocalModelClient("/path/to/hf-model")
stream = stream_rollouts(items, model=client, num_samples=8, max_staleness=1)
batch, step = [], 0
async for group in stream:              # in the order groups finish
    batch.append(group)
    if len(batch) == 4:
        step += 1
        train(trainer_model, batch)
        await client.load_weights(trainer_model.state_dict(), version=step)
        batch = []
print(stream.stats)                      # groups yielded, dropped as too stale, versions seen
```

It runs the job `run_rollouts` would (`plan_rollouts`, same arguments) with its trials started task by task,
so the first groups finish while later tasks are still sampling; the sandboxes a finished trial releases are
reset and reused by the next (pass `sandboxes=` to keep them across calls). Every sample records the
weights version that sampled it (`RolloutTrajectory.weights_version`, and per turn in its trajectory): the
version the trainer set with `load_weights(..., version=step)`.

Staleness: a group is as old as its oldest model turn. With `max_staleness=N`, a group whose oldest turn is
more than N versions behind the current one when it finishes (`current_version()`, by default the lent local
client's engine version) is dropped, not yielded, and counted in `stats.dropped`: a trainer never trains on
samples further off-policy than its bound. Dropping rather than re-sampling keeps the stream's cost
predictable (a re-sample would cost a whole group and could go stale again); a trainer that needs a fixed
number of groups reads on, or passes more items.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from evsys.engine.job import Job
from evsys.engine.spec import PlannedTrial
from evsys.model.local.client import LocalModelClient
from evsys.records import AdvantageMethod, IntegrityPolicy, TrajectoryGroup, TrialResult
from evsys.rollouts import RolloutPlan, plan_rollouts
from evsys.task.models import Task
from evsys.trajectory.groups import finalize_group, oldest_version, rollout_from_trial
from evsys.trajectory.integrity import integrity_policy

VersionSource = Callable[[], Awaitable[int | None]]


@dataclass
class StreamStats:
    """What a stream has done so far: groups yielded and dropped (too stale), and the versions it saw."""

    yielded: int = 0
    dropped: int = 0
    dropped_tasks: list[str] = field(default_factory=list)
    versions: dict[int, int] = field(default_factory=dict)  # weights version -> samples sampled with it


class RolloutStream:
    """An async iterator of `TrajectoryGroup`s in the order they finish; see the module docstring."""

    def __init__(
        self,
        plan: RolloutPlan,
        advantage: AdvantageMethod,
        max_staleness: int | None,
        current_version: VersionSource | None,
        integrity: IntegrityPolicy = IntegrityPolicy.ZERO,
    ) -> None:
        self.job: Job = plan.job
        self.stats = StreamStats()
        self._advantage = advantage
        self._integrity = integrity
        self._max_staleness = max_staleness
        self._current_version = current_version
        self._done: dict[str, list[TrialResult]] = {}
        self._planned: dict[str, list[PlannedTrial]] = {}
        self._queue: asyncio.Queue[TrajectoryGroup | None] = asyncio.Queue()
        self.job.on_trial_done = self._trial_done

    def __aiter__(self) -> AsyncIterator[TrajectoryGroup]:
        return self._groups()

    async def _groups(self) -> AsyncIterator[TrajectoryGroup]:
        runner = asyncio.create_task(self.job.run())
        runner.add_done_callback(lambda _: self._queue.put_nowait(None))
        try:
            while (group := await self._queue.get()) is not None:
                if await self._fresh(group):
                    self.stats.yielded += 1
                    yield group
            await runner  # the job's own error, if it failed
        finally:
            if not runner.done():  # the consumer stopped early: cancel what is still running
                self.job.cancel()
                await asyncio.gather(runner, return_exceptions=True)

    async def _fresh(self, group: TrajectoryGroup) -> bool:
        """False (and the group counted as dropped) when it is older than `max_staleness` allows."""
        if self._max_staleness is None or self._current_version is None:
            return True
        oldest = [v for t in group.trajectories if (v := oldest_version(t.trajectory)) is not None]
        current = await self._current_version()
        if not oldest or current is None or current - min(oldest) <= self._max_staleness:
            return True
        self.stats.dropped += 1
        self.stats.dropped_tasks.append(group.task_id)
        return False

    def _trial_done(self, result: TrialResult) -> None:
        """Collect a finished trial; once every trial of its task has finished, queue the task's group."""
        if not self._planned:  # the job's plan, by task, read once (the job has planned when a trial ends)
            for planned in self.job.planned:
                self._planned.setdefault(planned.config.task_name, []).append(planned)
        task = result.task_name
        done = self._done.setdefault(task, [])
        done.append(result)
        if len(done) == len(self._planned[task]):
            self._queue.put_nowait(self._group(task, self._planned[task][0].task, done))

    def _group(self, task: str, loaded: Task | None, results: list[TrialResult]) -> TrajectoryGroup:
        prompt = loaded.instruction if loaded is not None else ""
        group = TrajectoryGroup(group_id=f"{self.job.config.job_name}/{task}", task_id=task, prompt=prompt)
        for result in sorted(results, key=lambda r: r.attempt):
            trajectory = self.job.store.trajectory(result.trial_name)
            sample = rollout_from_trial(result, trajectory, task, self._integrity)
            if sample.weights_version is not None:
                self.stats.versions[sample.weights_version] = (
                    self.stats.versions.get(sample.weights_version, 0) + 1
                )
            group.trajectories.append(sample)
        return finalize_group(group, self._advantage)


def _engine_version(model: Any) -> VersionSource | None:
    """The lent local client's current weights version, read when a group finishes."""
    if isinstance(model, LocalModelClient):
        return model.weights_version
    return None


async def stream_rollouts(
    items: Any,
    *,
    max_staleness: int | None = None,
    current_version: VersionSource | None = None,
    advantage: AdvantageMethod = "mean",
    integrity: IntegrityPolicy | str = IntegrityPolicy.ZERO,
    **options: Any,
) -> RolloutStream:
    """A `RolloutStream` over `items` (see the module docstring); `options` are `run_rollouts`' (`model`,
    `num_samples`, `n_concurrent`, `sandboxes`, ...); `integrity` as there (the groups carry the same policy).
    `current_version` is an async callable giving the version the trainer has loaded; by default the lent
    `LocalModelClient`'s engine version."""
    if max_staleness is not None and max_staleness < 0:
        raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
    policy = integrity_policy(integrity)
    plan = await plan_rollouts(items, advantage=advantage, integrity=policy, by_task=True, **options)
    source = current_version or _engine_version(options.get("model"))
    return RolloutStream(plan, advantage, max_staleness, source, policy)
