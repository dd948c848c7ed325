"""The `Executor` protocol: runs a job's trials with bounded concurrency, streams results, cancels.

An executor gets an `ExecutorContext` from the job (its `JobStore`, the concurrency bound, live resources
the driver holds for in-process trials, a callback when a trial starts) and implements one method,
`execute(planned)`: run one trial to its `TrialResult`, with the trial's files committed to the job directory
through the store by the time it returns. The base class supplies the rest: `submit` (a task; at most
`n_concurrent` execute at once, started in submission order), `stream` (results as they finish), `cancel`
(every unfinished trial is cancelled; a running one records `cancelled`) and `aclose`.

A remote executor ships `planned.spec` (a `TrialSpec`: JSON/pickle-safe) to a worker that calls
`evsys.engine.run.run_trial_sync`, and commits the returned `PackedTrial` with `store.import_trial`, so only
the driver writes the job directory (the processes executor's workers, on the same machine, write their own
trials' directories instead). `check_job` refuses what an executor cannot run (a model living in the
driver's process) before the job starts. Executors register by name with `register_executor`, or from other
packages in the `evsys.executors` entry-point group; the registry and the options models live in the
behaviour-free `evsys.engine.executor_plugins`, which the job's config validates options with.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import BaseModel

from evsys.engine.config import JobConfig
from evsys.engine.executor_plugins import EXECUTOR_ENTRY_POINTS, EXECUTORS, ExecutorPlugin, NoOptions
from evsys.engine.run import TrialResources
from evsys.engine.spec import PlannedTrial
from evsys.engine.store import JobStore
from evsys.records import TrialResult

__all__ = [
    "EXECUTORS",
    "EXECUTOR_ENTRY_POINTS",
    "Executor",
    "ExecutorContext",
    "ExecutorUnavailableError",
    "create_executor",
    "executor_class",
    "executor_names",
    "register_executor",
]


@dataclass
class ExecutorContext:
    """What the job hands its executor."""

    store: JobStore
    n_concurrent: int = 4
    resources: Callable[[PlannedTrial], TrialResources] = field(default=lambda _planned: TrialResources())
    on_start: Callable[[str], None] = field(default=lambda _name: None)
    reuse_sandboxes: bool = True
    warm_sandboxes: int = 0  # started sandboxes per environment spec kept ready (the job's `warm_sandboxes`)
    options: BaseModel = field(default_factory=lambda: NoOptions())  # the executor's `options_model`


class ExecutorUnavailableError(ValueError):
    """The executor cannot run here (an optional extra is not installed); the message says what to install."""


class Executor(ExecutorPlugin, ABC):
    """Runs trials; see the module docstring. Subclasses implement `execute` (and may set `name` and
    `options_model`, see `ExecutorPlugin`)."""

    in_process: ClassVar[bool] = False  # True: trials run in the driver's process, sharing live objects

    @classmethod
    def check_available(cls) -> None:
        """`ExecutorUnavailableError` naming what to install when this executor cannot run here."""
        return None

    @classmethod
    def check_job(cls, config: JobConfig) -> None:
        """ValueError saying why this executor cannot run `config`'s trials (say, a model that lives in the
        driver's process); called before the job starts. Every job is fine by default."""
        return None

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


def _executor_class(name: str, cls: object) -> type[Executor]:
    if not (isinstance(cls, type) and issubclass(cls, Executor)):
        raise TypeError(f"executor {name!r} must be an Executor subclass, got {cls!r}")
    return cls


def register_executor(name: str, cls: type[Executor]) -> type[Executor]:
    """Make `cls` available as `JobConfig(executor={"name": name})`; returns it (usable in a class
    decorator's body)."""
    EXECUTORS.register(name, _executor_class(name, cls), replace=True)
    return cls


def executor_names() -> list[str]:
    """Every executor name: built in, registered in code, or declared as an entry point."""
    return EXECUTORS.names()


def executor_class(name: str) -> type[Executor]:
    """The executor class registered as `name`; `UnknownNameError` (a ValueError) listing the known ones."""
    return _executor_class(name, EXECUTORS.get(name))


def create_executor(name: str, ctx: ExecutorContext) -> Executor:
    """The executor registered as `name`; ValueError listing the known ones otherwise."""
    return executor_class(name)(ctx)
