"""`TrialState`: everything one trial knows while it runs, in one place.

Every phase (environment, agent, verifier, separate verification, sidecars, the step drivers) is a function
over a `TrialState`: it reads what earlier phases left (the sandbox, whether it is still alive, the network
it runs with, whether the agent finished) and records what happened on `state.result` through `fail` and
`timed`. Nothing else holds trial state.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from evsys.engine.image_services import ImageServices
from evsys.engine.spec import TrialSpec
from evsys.engine.store import JobStore
from evsys.engine.trial.pause import PausableTimeout
from evsys.model.base import ModelClient
from evsys.model.waiting import pausing
from evsys.records import FailureCause, StepResult, Trajectory, TrajectoryRecorder, TrialFailure, TrialResult
from evsys.repo.workspace import METADATA_KEY
from evsys.sandbox.base import Sandbox
from evsys.sandbox.pool import Lease, SandboxPool
from evsys.task.models import Task
from evsys.task.network import DEFAULT_PLAN, PUBLIC, NetworkPlan, NetworkPolicy

if TYPE_CHECKING:
    from evsys.engine.config import TrialConfig

T = TypeVar("T")


class RunningSidecars(Protocol):
    """The task's running sidecars as the trial holds them (evsys.engine.trial.sidecars.Sidecars)."""

    async def stop(self) -> list[str]:
        """Stop every sidecar; the warnings of those that failed to stop."""


def describe_exception(exc: BaseException) -> str:
    """`Type: message` of an exception (the type alone when it has no message)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def new_result(spec: TrialSpec, task: Task | None) -> TrialResult:
    """The trial's result before anything ran: names, attempt, the task's warnings, earlier tries."""
    cfg = spec.config
    return TrialResult(
        trial_name=cfg.trial_name,
        task_name=cfg.task_name,
        task_path=str(cfg.task_path),
        dataset=cfg.dataset,
        dataset_version=cfg.dataset_version,
        agent=cfg.agent.name,
        model=cfg.agent.model,
        attempt=cfg.attempt,
        warnings=list(task.warnings) if task else [],
        retries=list(spec.retries),
        group=cfg.group,
    )


@dataclass
class TrialState:
    """One running trial: its inputs, its sandbox and what the phases so far decided.

    `sandbox_alive` is False once the sandbox is lost (or never started): later phases skip what needs it and
    the sandbox is not reused. `agent_finished` is True when `agent.run` returned normally (its services keep
    running into verification). `network` is the plan of the current step's phases, `network_now` what the
    sandbox runs with.
    """

    spec: TrialSpec
    store: JobStore
    pool: SandboxPool  # where the trial acquires its sandboxes
    task: Task | None = None
    uses_sandbox: bool = True  # False: a Python task without a sandbox, answered by one model call
    model_client: ModelClient | None = None
    on_event: Callable[[dict[str, Any]], None] | None = None
    images: ImageServices = field(default_factory=ImageServices)  # the job's, else the trial's own
    result: TrialResult = field(init=False)
    lease: Lease | None = None  # the trial's sandbox, held until `stop_sandbox`
    sandbox: Sandbox | None = None
    sandbox_alive: bool = False
    sidecars: RunningSidecars | None = None
    recorder: TrajectoryRecorder | None = None
    agent_finished: bool = False
    usage_from_agent: bool = False  # the agent reported its usage itself (a harness): keep it
    network: NetworkPlan = DEFAULT_PLAN  # until the task's plan is resolved
    network_now: NetworkPolicy = PUBLIC
    scored_trajectory: Trajectory | None = None  # the trajectory as the verifier chain saw it
    current_step: StepResult | None = None  # the running step of a multi-step task
    traceback: str | None = None
    # a repository row's grading sandbox, being prepared while the agent runs (evsys.engine.trial.fresh)
    grading_prep: asyncio.Task[Any] | None = None

    def __post_init__(self) -> None:
        self.result = new_result(self.spec, self.task)

    @property
    def config(self) -> TrialConfig:
        """The trial's config (names, scaled timeouts, log limits)."""
        return self.spec.config

    @property
    def is_repository_task(self) -> bool:
        """True for a repository task (a SWE-bench-style row): its grader writes a per-test report."""
        return self.task is not None and METADATA_KEY in self.task.config.metadata

    @property
    def live_sandbox(self) -> Sandbox | None:
        """The sandbox while it is alive, else None."""
        return self.sandbox if self.sandbox_alive else None

    def require_sandbox(self) -> Sandbox:
        """The trial's sandbox; only called by phases that run after it started."""
        if self.sandbox is None:
            raise RuntimeError("the trial has no sandbox")
        return self.sandbox

    def require_task(self) -> Task:
        """The trial's task; only called by phases that run after it was loaded."""
        if self.task is None:
            raise RuntimeError("the trial's task is not loaded")
        return self.task

    def fail(self, cause: FailureCause, message: str) -> None:
        """Record a failure: the first one is primary, later ones are appended to its message (and on the
        running step of a multi-step task)."""
        step = self.current_step
        if step is not None and step.failure is None:
            step.failure = TrialFailure(cause=cause, message=message)
        if self.result.failure is None:
            self.result.failure = TrialFailure(cause=cause, message=message)
        else:
            self.result.failure.message += f"; then {cause.value}: {message}"

    def lose_sandbox(self, cause: FailureCause, message: str) -> None:
        """The sandbox broke: record the failure; it is neither used again nor reused."""
        self.sandbox_alive = False
        self.fail(cause, message)

    def keep_traceback(self, exc: BaseException) -> None:
        """Keep `exc`'s traceback for the trial's exception.txt (Harbor's name), never the terminal."""
        text = "".join(traceback.format_exception(exc))
        self.traceback = text if self.traceback is None else f"{self.traceback}\n{text}"

    async def timed(self, phase: str, awaitable: Awaitable[T], limit: float | None = None) -> T:
        """Await `awaitable` (bounded by `limit` seconds: TimeoutError), adding its time to `phase` of the
        result's timing (a phase run in parts, like agent setup, adds up). Watchers of the trial's events
        (`evsys run`'s progress, `--stream`) get a `phase` event as it starts."""
        if self.on_event is not None:
            self.on_event({"trial": self.spec.trial_name, "type": "phase", "data": {"phase": phase}})
        started = time.perf_counter()
        try:
            if limit is None:
                return await awaitable
            async with asyncio.timeout(limit) as timeout:  # no task of its own, unlike asyncio.wait_for
                clock = PausableTimeout(timeout)
                try:
                    with pausing(clock):  # a local model's load and queue do not count
                        return await awaitable
                finally:
                    clock.active = False  # tasks started in the block (a proxy) may outlive it
        finally:
            spent = getattr(self.result.timing, phase) or 0.0
            setattr(self.result.timing, phase, spent + time.perf_counter() - started)
