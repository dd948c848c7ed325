"""One trial, whatever the task: environment -> agent -> verifier chain -> collect; writes via JobStore.

Phases and guarantees:
1. environment: the sandbox spec (adjusted by the agent's `prepare_sandbox` hook), then the sandbox, a slot
   of the job's SlotPool (setup timeout = `[environment] build_timeout_sec` x setup multiplier). Skipped for a
   task that runs without a sandbox (a Python task with `sandbox=False`). The sandbox half lives in
   evsys.engine.sandboxing;
2. agent: `agent.setup` (`[agent] setup_timeout_sec` x setup multiplier), then `agent.run` (`[agent]
   timeout_sec` x agent multiplier). A Python task without a sandbox is answered by `SingleTurnAgent` (one
   model call); every other task by the agent the trial names;
3. verifier chain (evsys.verify.chain, built from the task's config): after a normal agent finish, what the
   agent started keeps running through verification (a server the task asked for is checked by tests/test.sh,
   as in Harbor); after an agent timeout, error or failed setup `sandbox.kill_processes()` runs first. Then
   the verifier phase's network (`[verifier] network_mode`) and each link's in-sandbox half (the test script,
   evsys's own programs by absolute path), even after an agent timeout or error, while the sandbox is alive —
   in a fresh sandbox with `[verifier] environment_mode = "separate"` (evsys.engine.separate). A multi-step
   task runs these phases once per step (evsys.engine.steps);
4. collect: /logs copied out in one go (agent/, verifier/, artifacts/), then the chain scores host-side
   (reward files, verifier functions, rubrics, judges), each link seeing the rewards before it (the test run,
   the copy and the scoring live in evsys.engine.verifying);
5. the slot's release — always, in `finally`; then trajectory.json and result.json are written atomically.
The first failure is the trial's primary cause; later ones are appended to its message. Every file goes
through the `JobStore` the trial was given (the driver's, or a worker's scratch store: evsys.engine.run).
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from evsys.agent.base import Agent, AgentContext, AgentResult
from evsys.agent.registry import AgentNotFoundError, resolve_agent
from evsys.agent.single_turn import SingleTurnAgent
from evsys.engine import environment
from evsys.engine.sandboxing import EnvironmentPhaseMixin, describe_exception, sandbox_spec
from evsys.engine.separate import SeparateVerifierMixin
from evsys.engine.sidecars import SidecarsMixin
from evsys.engine.spec import TrialSpec
from evsys.engine.steps import StepsMixin
from evsys.engine.store import JobStore
from evsys.engine.verifying import VerifierPhaseMixin
from evsys.records import (
    AgentInfo,
    FailureCause,
    SandboxSpec,
    Trajectory,
    TrajectoryRecorder,
    TrialFailure,
    TrialResult,
    utc_now,
)
from evsys.repo.workspace import METADATA_KEY
from evsys.sandbox.base import Sandbox, SandboxError
from evsys.sandbox.slots import Slot, SlotPool
from evsys.task.models import Task
from evsys.task.network import DEFAULT_PLAN, PUBLIC, resolve_network_plan
from evsys.verify.chain import VerifyContext, chain_for_task

T = TypeVar("T")
EXCEPTION_FILE = "exception.txt"
SETUP_FAILED = object()  # returned by Trial._agent_setup_step after it recorded the failure


def classify_agent_exception(exc: BaseException) -> FailureCause:
    """The failure cause of an exception raised by an agent (see evsys.agent.base)."""
    if isinstance(exc, SandboxError):
        return FailureCause.SANDBOX_FAILED
    declared = getattr(exc, "failure_cause", None)
    try:
        return FailureCause(declared) if declared else FailureCause.AGENT_ERROR
    except ValueError:
        return FailureCause.AGENT_ERROR


class Trial(EnvironmentPhaseMixin, VerifierPhaseMixin, StepsMixin, SeparateVerifierMixin, SidecarsMixin):
    """Runs one trial once (the job handles retries) and writes its files through `store`."""

    def __init__(
        self,
        spec: TrialSpec,
        store: JobStore,
        *,
        task: Task | None = None,
        model_client: Any = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        slots: SlotPool | None = None,
    ) -> None:
        self.spec = spec
        self.config = spec.config
        self.task = task
        # the trial's sandbox is a slot of the job's SlotPool (one slot per sandbox); without a job's, a
        # pool that keeps nothing: every sandbox is started and stopped
        self.slots = slots or SlotPool.for_backend(spec.sandbox, max_idle=0)
        self.slot: Slot | None = None
        self.store = store
        self.model_client = model_client
        self.on_event = on_event
        self.sandbox: Sandbox | None = None
        self.sandbox_alive = False
        self.recorder: TrajectoryRecorder | None = None
        self._usage_from_agent = False
        self.agent_finished = False  # set when agent.run returned normally: its services stay up
        self.network = DEFAULT_PLAN  # until the task's plan is resolved
        self._network_now = PUBLIC  # what the sandbox runs with now
        self._scored_trajectory: Trajectory | None = None
        self._traceback: str | None = None
        self.result = self._new_result()
        self.result.retries = list(spec.retries)

    @property
    def _is_repository_task(self) -> bool:
        return self.task is not None and METADATA_KEY in self.task.config.metadata

    @property
    def uses_sandbox(self) -> bool:
        """False for a Python task that asked for no sandbox: it is answered by one model call."""
        python_task = self.spec.python_task
        return python_task is None or python_task.sandbox

    def _new_result(self) -> TrialResult:
        cfg, task = self.config, self.task
        host_image = bool(task and task.environment.needs_image and self.spec.skip_build)
        return TrialResult(
            trial_name=cfg.trial_name,
            task_name=cfg.task_name,
            task_path=str(cfg.task_path),
            dataset=cfg.dataset,
            agent=cfg.agent.name,
            model=cfg.agent.model,
            attempt=cfg.attempt,
            ran_on_host_image=host_image,
            warnings=list(task.warnings) if task else [],
        )

    def fail(self, cause: FailureCause, message: str) -> None:
        """Record a failure: the first one is primary, later ones are appended to its message (and on the
        running step of a multi-step task)."""
        self._step_failed(cause, message)
        if self.result.failure is None:
            self.result.failure = TrialFailure(cause=cause, message=message)
        else:
            self.result.failure.message += f"; then {cause.value}: {message}"

    async def _timed(self, phase: str, awaitable: Awaitable[T], limit: float | None = None) -> T:
        started = time.perf_counter()
        try:
            if limit is None:
                return await awaitable
            async with asyncio.timeout(limit):  # no task of its own, unlike asyncio.wait_for
                return await awaitable
        finally:  # a phase run in steps (agent setup: prepare_sandbox, then setup) adds up
            spent = getattr(self.result.timing, phase) or 0.0
            setattr(self.result.timing, phase, spent + time.perf_counter() - started)

    async def _agent_setup_step(self, awaitable: Awaitable[T]) -> T | object:
        """One step of agent setup, all steps together bounded by the setup timeout; `SETUP_FAILED` once
        the failure is recorded."""
        limit = self.config.setup_timeout_sec
        spent = self.result.timing.agent_setup or 0.0
        try:
            return await self._timed("agent_setup", awaitable, None if limit is None else limit - spent)
        except TimeoutError:
            self.fail(FailureCause.AGENT_ERROR, f"agent setup did not finish within {limit:g} s")
        except Exception as exc:
            self._agent_failed(exc, "agent setup failed")
        return SETUP_FAILED

    async def run(self) -> TrialResult:
        """Run the trial and write its files. On cancellation: records `cancelled`, re-raises."""
        started = time.perf_counter()
        trial_dir = await self.store.reset_trial_dir(self.config.trial_name)
        await self.store.write_trial_config(self.config)
        recorder = TrajectoryRecorder(self.config.trial_name, AgentInfo(name=self.config.agent.name))
        self.recorder = recorder
        try:
            if self.spec.failure is not None:
                self.result.failure = self.spec.failure
            elif await self._load_task():
                await self._lifecycle(trial_dir, recorder)
        except asyncio.CancelledError:
            self.fail(FailureCause.CANCELLED, "the job was cancelled while this trial ran; resume reruns it")
            raise
        except AgentNotFoundError as exc:
            self.fail(FailureCause.AGENT_ERROR, str(exc))
        except Exception as exc:  # an unexpected error still ends in a result.json, never a crashed job
            self.fail(FailureCause.SANDBOX_FAILED, f"unexpected error: {describe_exception(exc)}")
            self._keep_traceback(exc)
        finally:
            try:
                await self._stop_sandbox()
            finally:
                await self._stop_sidecars()  # after the main sandbox, which shares their network
            self.result.timing.total = time.perf_counter() - started
            self.result.finished_at = utc_now()
            await self._save(recorder)
        return self.result

    async def _load_task(self) -> bool:
        """The task from the spec's reference when the planner's copy is not at hand (a worker elsewhere)."""
        if self.task is not None:
            return True
        try:
            self.task = await asyncio.to_thread(self.spec.task.load)
        except Exception as exc:
            self.fail(
                FailureCause.TASK_INVALID,
                f"{self.spec.task.path}: the task cannot be loaded: {describe_exception(exc)}",
            )
            return False
        self.result.warnings.extend(self.task.warnings)
        self.result.ran_on_host_image = self.task.environment.needs_image and self.spec.skip_build
        return True

    def _keep_traceback(self, exc: BaseException) -> None:
        """Keep `exc`'s traceback for the trial's exception.txt (Harbor's name), never the terminal."""
        text = "".join(traceback.format_exception(exc))
        self._traceback = text if self._traceback is None else f"{self._traceback}\n{text}"

    async def _save(self, recorder: TrajectoryRecorder) -> None:
        if self._traceback is not None:
            await self.store.write_trial_file(self.config.trial_name, EXCEPTION_FILE, self._traceback)
            self.result.exception_file = EXCEPTION_FILE
        usage = recorder.usage()
        trajectory = self._scored_trajectory
        if trajectory is None or len(trajectory.steps) != len(recorder.steps):
            trajectory = recorder.build(usage)
        if not self._usage_from_agent:
            self.result.usage = usage
        await self.store.write_trajectory(self.config.trial_name, trajectory)
        await self.store.write_trial_result(self.result)

    def _agent(self) -> Any:
        if not self.uses_sandbox:
            return SingleTurnAgent(**self.config.agent.kwargs)
        return resolve_agent(self.config.agent.name, self.config.agent.kwargs)

    async def _lifecycle(self, trial_dir: Path, recorder: TrajectoryRecorder) -> None:
        task = self.task
        assert task is not None
        agent = self._agent()
        recorder.agent = AgentInfo(
            name=self.config.agent.name if not self.uses_sandbox else agent.name,
            version=str(getattr(agent, "version", "unknown")),
            model_name=self.config.agent.model,
        )
        ctx = AgentContext(
            task=task,
            trial_name=self.config.trial_name,
            logs_dir=trial_dir / "agent",
            trajectory=recorder,
            model_name=self.config.agent.model,
            model_client=self.model_client,
            timeout_sec=self.config.agent_timeout_sec,
            kwargs=self.config.agent.kwargs,
            on_event=self.on_event,
        )
        try:
            if self.uses_sandbox:
                spec = await self._prepare_spec(agent, task, ctx)
                if spec is None or not await self._start_sandbox(spec):
                    return
                if task.steps:
                    await self._run_steps(agent, task, ctx, trial_dir)
                    return
            agent_ok = await self._run_agent(agent, task, ctx)
            if (
                agent_ok or self.uses_sandbox
            ):  # without a sandbox, a failed model call leaves nothing to score
                await self._after_agent(task, trial_dir)
        finally:
            await agent.close()

    async def _prepare_spec(self, agent: Agent, task: Task, ctx: AgentContext) -> SandboxSpec | None:
        """The trial's sandbox spec, adjusted by the agent's optional `prepare_sandbox` hook (e.g. a harness
        binding its install tree and proxy socket); None when that hook failed."""
        self.network = resolve_network_plan(task.config, override=self.config.network)
        spec = sandbox_spec(task, self.spec.job_name, self.config.trial_name, self.network)
        if environment.needs_image(task, self.spec.skip_build):
            spec = await self._on_image(task, spec)
            spec = spec and await self._start_sidecars(task, spec)
            if spec is None:
                return None
        prepared = await self._agent_setup_step(agent.prepare_sandbox(spec, ctx))
        return None if prepared is SETUP_FAILED else prepared

    async def _run_agent(self, agent: Agent, task: Task, ctx: AgentContext) -> bool:
        """Agent setup and run; False when the agent produced nothing to score (setup failed, or it raised
        before a single-turn completion existed)."""
        if await self._agent_setup_step(agent.setup(self.sandbox, ctx)) is SETUP_FAILED:
            return False
        return await self._agent_turn(agent, task.instruction, ctx, self.config.agent_timeout_sec)

    async def _agent_turn(
        self, agent: Agent, instruction: str, ctx: AgentContext, limit: float | None
    ) -> bool:
        """`agent.run` bounded by `limit` seconds; sets `agent_finished` (and returns True) when it returned
        normally."""
        sandbox = self.sandbox
        try:
            result = await self._timed("agent_run", agent.run(instruction, sandbox, ctx), limit)
        except TimeoutError:
            self.fail(
                FailureCause.AGENT_TIMEOUT, f"the agent ran past its timeout of {limit:g} s and was killed"
            )
            return False
        except Exception as exc:
            self._agent_failed(exc, "the agent failed")
            return False
        self.agent_finished = True
        if isinstance(result, AgentResult):
            self.result.agent_metadata = result.metadata
            ctx.trajectory.extend(result.steps)
            if result.usage is not None:
                self.result.usage = result.usage
                self._usage_from_agent = True
        return True

    def _agent_failed(self, exc: Exception, what: str) -> None:
        cause = classify_agent_exception(exc)
        if cause == FailureCause.SANDBOX_FAILED:
            self.sandbox_alive = False
        self.fail(cause, f"{what}: {describe_exception(exc)}")
        self._keep_traceback(exc)

    async def _after_agent(self, task: Task, trial_dir: Path) -> None:
        """Kill the leftovers of an agent that did not finish, run the chain's in-sandbox half, copy /logs
        out, then score."""
        chain = chain_for_task(task, self.spec.python_task, self.config.verifier_timeout_sec)
        if self.sandbox_alive and self.sandbox is not None and not self.agent_finished:
            try:
                await self.sandbox.kill_processes()
            except SandboxError as exc:
                self.sandbox_alive = False
                self.fail(
                    FailureCause.SANDBOX_FAILED,
                    f"could not kill the agent's processes: {describe_exception(exc)}",
                )
        vctx = VerifyContext(
            verifier_dir=trial_dir / "verifier",
            sandbox=self.sandbox if self.sandbox_alive else None,
            prompt=task.instruction,
            base_dir=task.path,
            timeout_sec=self.config.verifier_timeout_sec,
        )
        if self.uses_sandbox and task.config.verifier.environment_mode == "separate":
            await self._verify_separately(task, chain, vctx, trial_dir)
            return
        if self.uses_sandbox and task.config.artifacts and self.sandbox_alive:
            await self._collect_artifacts(task, trial_dir / "artifacts")
        if self.uses_sandbox and self.sandbox_alive and chain.needs_sandbox:
            if not await self._switch_network(self.network.verifier, "verifier"):
                vctx.sandbox = None
        ready = await self._run_in_sandbox(chain, vctx) if chain.needs_sandbox else True
        collected = await self._collect_logs(trial_dir) if self.uses_sandbox else True
        if ready and not collected:
            self.fail(FailureCause.VERIFIER_ERROR, "could not copy /logs/verifier out of the sandbox")
        elif ready:
            await self._score(chain, vctx)
