"""`Trial`: one trial, run once (the job handles retries), its files written through a `JobStore`.

1. the task (the planner's copy, or loaded from the spec's reference by a worker elsewhere);
2. the environment phase (evsys.engine.trial.environment): the sandbox spec — on the task's image
   (evsys.engine.trial.images) and in its sidecars' pod (evsys.engine.trial.sidecars) — adjusted by the
   agent's `prepare_sandbox` hook, then the sandbox, a lease of the job's SandboxPool. Skipped for a task that
   runs without a sandbox (a Python task with `sandbox=False`);
3. a driver: evsys.engine.trial.single_step (the agent phase, evsys.engine.trial.agent, then the verifier
   phase, evsys.engine.trial.verifier / separate), or evsys.engine.trial.multi_step for a task with
   `[[steps]]`. A single-step agent that `starts_before_sandbox` begins its first steps (the loop agent's
   first model call) together with the sandbox's start, so the start hides behind inference;
4. the judgement of the sandbox's own limits (evsys.engine.trial.exhaustion: a trial whose sandbox hit them
   is `agent_exhausted_resources`, reward 0), then the slot's release — always, in `finally` — then the
   sidecars'; trajectory.json and result.json (and exception.txt when something raised) are written
   atomically.
Everything the phases know and decide is on one `TrialState` (evsys.engine.trial.state). The first failure
is the trial's primary cause; later ones are appended to its message. An unexpected error still ends in a
result.json (`sandbox_failed`), never a crashed job.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evsys.agent.base import Agent, AgentContext
from evsys.agent.registry import AgentNotFoundError
from evsys.engine.config import TrialConfig
from evsys.engine.image_services import ImageServices
from evsys.engine.spec import TrialSpec
from evsys.engine.store import JobStore
from evsys.engine.trial.agent import (
    agent_info,
    answers_with_reference,
    begin_early,
    end_early,
    prepare_sandbox,
    trial_agent,
    trial_kwargs,
)
from evsys.engine.trial.environment import environment_spec, start_sandbox, stop_sandbox
from evsys.engine.trial.exhaustion import judge_exhaustion
from evsys.engine.trial.fresh import release_grading_preparation, start_grading_preparation
from evsys.engine.trial.keep import keep_no_steps
from evsys.engine.trial.multi_step import run_steps
from evsys.engine.trial.sidecars import stop_sidecars
from evsys.engine.trial.single_step import run_single_step
from evsys.engine.trial.state import TrialState, describe_exception
from evsys.model.base import ModelClient
from evsys.records import AgentInfo, FailureCause, TrajectoryRecorder, TrialResult, utc_now
from evsys.sandbox.pool import SandboxPool
from evsys.task.models import Task

EXCEPTION_FILE = "exception.txt"


class Trial:
    """Runs one trial once and writes its files through `store`.

    `agent`, when given, is the agent phase instead of the one the spec names, and the trial always has a
    sandbox (an episode served step by step: its client's actions run there)."""

    def __init__(
        self,
        spec: TrialSpec,
        store: JobStore,
        *,
        task: Task | None = None,
        model_client: ModelClient | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        pool: SandboxPool | None = None,
        agent: Agent | None = None,
        images: ImageServices | None = None,
    ) -> None:
        python_task = spec.python_task
        self.agent = agent
        self.state = TrialState(
            spec=spec,
            store=store,
            # the trial's sandbox is a lease of the job's pool; without a job's, a pool that keeps nothing:
            # every sandbox is started and stopped
            pool=pool or SandboxPool.for_backend(spec.sandbox, max_idle=0),
            task=task,
            uses_sandbox=agent is not None
            or python_task is None
            or (python_task.sandbox and not answers_with_reference(spec)),
            model_client=model_client,
            on_event=on_event,
            images=images or ImageServices(),
        )

    @property
    def config(self) -> TrialConfig:
        """The trial's config."""
        return self.state.config

    @property
    def result(self) -> TrialResult:
        """The trial's result (final once `run` returned)."""
        return self.state.result

    async def run(self) -> TrialResult:
        """Run the trial and write its files. On cancellation: records `cancelled`, re-raises."""
        state = self.state
        started = time.perf_counter()
        trial_dir = await state.store.start_trial(state.config)
        recorder = TrajectoryRecorder(state.config.trial_name, AgentInfo(name=state.config.agent.name))
        state.recorder = recorder
        try:
            if state.spec.failure is not None:
                state.result.failure = state.spec.failure
            elif await self._load_task():
                await self._drive(state.require_task(), trial_dir, recorder)
        except asyncio.CancelledError:
            state.fail(FailureCause.CANCELLED, "the job was cancelled while this trial ran; resume reruns it")
            raise
        except AgentNotFoundError as exc:
            state.fail(FailureCause.AGENT_ERROR, str(exc))
        except Exception as exc:  # an unexpected error still ends in a result.json, never a crashed job
            state.fail(FailureCause.SANDBOX_FAILED, f"unexpected error: {describe_exception(exc)}")
            state.keep_traceback(exc)
        finally:
            try:
                try:
                    await judge_exhaustion(state)  # before the release: the counters go with the sandbox
                finally:
                    await stop_sandbox(state)
            finally:
                await stop_sidecars(state)  # after the main sandbox, which shares their network
            state.result.timing.total = time.perf_counter() - started
            state.result.finished_at = utc_now()
            await self._save(recorder)
        return state.result

    async def _load_task(self) -> bool:
        """The task from the spec's reference when the planner's copy is not at hand (a worker elsewhere)."""
        state = self.state
        if state.task is not None:
            return True
        try:
            task = await asyncio.to_thread(state.spec.task.load)
        except Exception as exc:
            state.fail(
                FailureCause.TASK_INVALID,
                f"{state.spec.task.path}: the task cannot be loaded: {describe_exception(exc)}",
            )
            return False
        state.task = task
        state.result.warnings.extend(task.warnings)
        return True

    async def _drive(self, task: Task, trial_dir: Path, recorder: TrajectoryRecorder) -> None:
        """The environment phase, then the single-step or multi-step driver; the agent is closed after."""
        state = self.state
        agent = self.agent or trial_agent(state)
        recorder.agent = agent_info(state, agent)
        ctx = AgentContext(
            task=task,
            trial_name=state.config.trial_name,
            logs_dir=trial_dir / "agent",
            trajectory=recorder,
            model_name=state.config.agent.model,
            model_client=state.model_client,
            timeout_sec=state.config.agent_timeout_sec,
            kwargs=trial_kwargs(state),
            on_event=state.on_event,
            env={name: value.get_secret_value() for name, value in state.config.agent.env.items()},
        )
        early = None
        try:
            if state.uses_sandbox:
                spec = await environment_spec(state, task)
                spec = spec and await prepare_sandbox(state, agent, spec, ctx)
                if spec is None:
                    return
                if not task.steps:  # the agent's first steps beside the sandbox's start, when it can
                    early = begin_early(state, agent, task.instruction, ctx)
                if not await start_sandbox(state, spec):
                    return
                start_grading_preparation(state, task)  # a repository row's (evsys.engine.trial.fresh)
                if task.steps:
                    keep_no_steps(state)  # `--keep-state` keeps single-step trials only
                    await run_steps(state, agent, task, ctx, trial_dir)
                    return
            await run_single_step(state, agent, task, ctx, trial_dir, early)
        finally:
            await end_early(early)  # a sandbox that failed to start: its model call is cancelled
            await release_grading_preparation(state)
            await agent.close()

    async def _save(self, recorder: TrajectoryRecorder) -> None:
        state, store, name = self.state, self.state.store, self.state.config.trial_name
        if state.traceback is not None:
            await store.write_trial_file(name, EXCEPTION_FILE, state.traceback)
            state.result.exception_file = EXCEPTION_FILE
        usage = recorder.usage()
        trajectory = state.scored_trajectory
        if trajectory is None or len(trajectory.steps) != len(recorder.steps):
            trajectory = recorder.build(usage)
        if not state.usage_from_agent:
            state.result.usage = usage
        await store.finish_trial(trajectory, state.result)
