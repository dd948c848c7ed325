"""The `Executor` protocol: runs a job's trials with bounded concurrency, streams results, cancels.

An executor gets an `ExecutorContext` from the job (its `JobStore`, the concurrency bound, live resources
the driver holds for in-process trials, a callback when a trial starts) and implements one method,
`execute(planned)`: run one trial to its `TrialResult`, with the trial's files committed to the job directory
through the store by the time it returns. The base class supplies the rest: `submit` (a task; at most
`n_concurrent` execute at once, started in submission order), `stream` (results as they finish), `cancel`
(every unfinished trial is cancelled; a running one records `cancelled`) and `aclose`.

A remote executor ships `planned.spec` (a `TrialSpec`: JSON/pickle-safe) to a worker that calls
`evsys.engine.run.run_trial_sync`, and commits the returned `PackedTrial` with `store.import_trial`, so only
the driver writes the job directory. Executors register by name with `register_executor`, or from other
packages in the `evsys.executors` entry-point group.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, ClassVar

from evsys.engine.run import TrialResources
from evsys.engine.spec import PlannedTrial
from evsys.engine.store import JobStore
from evsys.records import TrialResult

EXECUTOR_ENTRY_POINTS = "evsys.executors"


@dataclass
class ExecutorContext:
    """What the job hands its executor."""

    store: JobStore
    n_concurrent: int = 4
    resources: Callable[[PlannedTrial], TrialResources] = field(default=lambda _planned: TrialResources())
    on_start: Callable[[str], None] = field(default=lambda _name: None)
    reuse_sandboxes: bool = True
    options: dict[str, Any] = field(default_factory=dict)  # the executor's own settings (e.g. RayOptions)


class ExecutorUnavailableError(ValueError):
    """The executor cannot run here (an optional extra is not installed); the message says what to install."""


class Executor(ABC):
    """Runs trials; see the module docstring. Subclasses implement `execute`."""

    name: ClassVar[str] = ""

    def __init__(self, ctx: ExecutorContext) -> None:
        self.ctx = ctx
        self._slots = asyncio.Semaphore(ctx.n_concurrent)
        self._tasks: set[asyncio.Task[TrialResult]] = set()

    @abstractmethod
    async def execute(self, planned: PlannedTrial) -> TrialResult:
        """Run one trial now (the slot is already held); its files are in the job directory on return."""

    def submit(self, planned: PlannedTrial) -> asyncio.Task[TrialResult]:
        """Queue one trial; the task finishes with its result once a slot was free and it ran."""
        task = asyncio.create_task(self._bounded(planned), name=planned.config.trial_name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _bounded(self, planned: PlannedTrial) -> TrialResult:
        async with self._slots:
            self.ctx.on_start(planned.config.trial_name)
            return await self.execute(planned)

    async def stream(self, trials: Iterable[PlannedTrial]) -> AsyncIterator[TrialResult]:
        """Submit every trial and yield the results in the order they finish."""
        for done in asyncio.as_completed([self.submit(p) for p in trials]):
            yield await done

    async def cancel(self) -> None:
        """Cancel every unfinished trial and wait until they have recorded it."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def aclose(self) -> None:
        """Release what the executor holds (the base holds nothing beyond its tasks)."""
        await self.cancel()


_REGISTERED: dict[str, type[Executor]] = {}


def register_executor(name: str, cls: type[Executor]) -> type[Executor]:
    """Make `cls` available as `Job(..., executor=name)`; returns it (usable as a class decorator's body)."""
    if not (isinstance(cls, type) and issubclass(cls, Executor)):
        raise TypeError(f"executor {name!r} must be an Executor subclass, got {cls!r}")
    _REGISTERED[name] = cls
    return cls


def _builtin() -> dict[str, type[Executor]]:
    from evsys.engine.executors.local import LocalExecutor
    from evsys.engine.executors.ray import RayExecutor  # imports Ray only when a RayExecutor is made

    return {"local": LocalExecutor, "ray": RayExecutor, **_REGISTERED}


def executor_names() -> list[str]:
    """Every executor name: built in, registered in code, or declared as an entry point."""
    return sorted({*_builtin(), *(ep.name for ep in entry_points(group=EXECUTOR_ENTRY_POINTS))})


def executor_class(name: str) -> type[Executor]:
    """The executor class registered as `name` (entry points are read only for a name not built in: reading
    every installed distribution's metadata costs tens of milliseconds); ValueError listing the known ones."""
    found = _builtin().get(name)
    if found is None:
        for ep in entry_points(group=EXECUTOR_ENTRY_POINTS, name=name):
            found = register_executor(name, ep.load())
            break
    if found is None:
        raise ValueError(f"unknown executor {name!r}; available: {', '.join(executor_names())}")
    return found


def create_executor(name: str, ctx: ExecutorContext) -> Executor:
    """The executor registered as `name`; ValueError listing the known ones otherwise."""
    return executor_class(name)(ctx)
