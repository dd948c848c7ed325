"""The agent phase of a trial: which agent runs, its optional `prepare_sandbox` hook and `setup` (together
bounded by the setup timeout), and `run` bounded by the agent timeout.

A Python task without a sandbox is answered by `SingleTurnAgent` (one model call), or by the loop agent when
it has custom tools or a respond hook (evsys.task.turns); every other task by the agent the trial names. An
agent that `starts_before_sandbox` has its `run_early` (the loop agent's first model call) begun with the
sandbox's start (`begin_early`): its seconds are the `agent_early` phase, overlapping `sandbox_start`;
`run_agent` awaits what is left of it before `run`, and `end_early` cancels it when the trial ends before
that (a sandbox that failed to start).

An agent's exception becomes the trial's failure: `sandbox_failed` for a `SandboxError` (the sandbox is then
not reused), else the cause the exception declares (evsys.agent.base), else `agent_error`; its traceback goes
to the trial's exception.txt.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from evsys.agent.base import Agent, AgentContext, AgentResult
from evsys.agent.loop import LoopAgent
from evsys.agent.oracle import OracleAgent, ReferenceAnswerAgent
from evsys.agent.registry import resolve_agent
from evsys.agent.single_turn import SingleTurnAgent
from evsys.engine.spec import TrialSpec
from evsys.engine.trial.state import TrialState, describe_exception
from evsys.records import AgentInfo, CausedError, FailureCause, SandboxSpec
from evsys.sandbox.base import SandboxError

T = TypeVar("T")


class SetupFailed(Exception):
    """A step of agent setup failed; the failure is already recorded on the trial."""


def classify_agent_exception(exc: BaseException) -> FailureCause:
    """The failure cause of an exception raised by an agent (see evsys.agent.base)."""
    if isinstance(exc, SandboxError):
        return FailureCause.SANDBOX_FAILED
    declared = exc.failure_cause if isinstance(exc, CausedError) else None
    try:
        return FailureCause(declared) if declared else FailureCause.AGENT_ERROR
    except ValueError:
        return FailureCause.AGENT_ERROR


ATTEMPT_SEED_STRIDE = 1_000_003
"""Attempt a's seed is `seed + (a - 1) * ATTEMPT_SEED_STRIDE`: apart by more than any run's turn count, so
the loop agent's per-turn seeds (`seed + turn`) of two attempts never meet."""


def attempt_seed(seed: int, attempt: int) -> int:
    """The seed attempt `attempt` (1-based; a `run_rollouts` sample index + 1) samples with: `seed` itself
    for the first, distinct and reproducible for the others."""
    return seed + (attempt - 1) * ATTEMPT_SEED_STRIDE


def trial_kwargs(state: TrialState) -> dict[str, Any]:
    """The agent kwargs of this trial: the job's, with an integer `seed` combined with the attempt, so `-k`
    attempts (and `num_samples`) of one task sample differently from one seed."""
    kwargs = dict(state.config.agent.kwargs)
    seed = kwargs.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool):
        kwargs["seed"] = attempt_seed(seed, state.config.attempt)
    return kwargs


def answers_with_reference(spec: TrialSpec) -> bool:
    """True for the `oracle` agent on a Python task: it answers with the task's reference answer (no model,
    no sandbox)."""
    return spec.python_task is not None and spec.config.agent.name == OracleAgent.name


def trial_agent(state: TrialState) -> Agent:
    """The agent of the trial: the reference answer for `oracle` on a Python task; for a Python task without
    a sandbox `SingleTurnAgent`, or the loop agent when the task has custom tools or a respond hook (its
    turns need no sandbox); else the named one; each with the trial's kwargs (`trial_kwargs`)."""
    agent, kwargs = state.config.agent, trial_kwargs(state)
    python_task = state.spec.python_task
    if python_task is not None and answers_with_reference(state.spec):
        return ReferenceAnswerAgent(python_task.reference_answer)
    if not state.uses_sandbox:
        if python_task is not None and python_task.interaction.multi_turn:
            return LoopAgent(**kwargs)
        return SingleTurnAgent(**kwargs)
    return resolve_agent(agent.name, kwargs)


def agent_info(state: TrialState, agent: Agent) -> AgentInfo:
    """Who acts, for the trajectory: the agent's name and version and the model."""
    return AgentInfo(
        name=agent.name if state.uses_sandbox else state.config.agent.name,
        version=str(agent.version),
        model_name=state.config.agent.model,
    )


def agent_failed(state: TrialState, exc: Exception, what: str) -> None:
    """Record an agent's exception as the trial's failure and keep its traceback."""
    cause = classify_agent_exception(exc)
    if cause == FailureCause.SANDBOX_FAILED:
        state.sandbox_alive = False
    state.fail(cause, f"{what}: {describe_exception(exc)}")
    state.keep_traceback(exc)


async def setup_step(state: TrialState, awaitable: Awaitable[T]) -> T:
    """One step of agent setup, all steps together bounded by the setup timeout; `SetupFailed` once the
    failure is recorded."""
    limit = state.config.setup_timeout_sec
    spent = state.result.timing.agent_setup or 0.0
    try:
        return await state.timed("agent_setup", awaitable, None if limit is None else limit - spent)
    except TimeoutError:
        state.fail(FailureCause.AGENT_ERROR, f"agent setup did not finish within {limit:g} s")
    except Exception as exc:
        agent_failed(state, exc, "agent setup failed")
    raise SetupFailed


async def prepare_sandbox(
    state: TrialState, agent: Agent, spec: SandboxSpec, ctx: AgentContext
) -> SandboxSpec | None:
    """`spec` adjusted by the agent's `prepare_sandbox` hook (e.g. a harness binding its install tree and
    proxy socket); None once its failure is recorded."""
    try:
        return await setup_step(state, agent.prepare_sandbox(spec, ctx))
    except SetupFailed:
        return None


async def setup_agent(state: TrialState, agent: Agent, ctx: AgentContext) -> bool:
    """`agent.setup` in the trial's sandbox; False once its failure is recorded."""
    # None only for a Python task without a sandbox, whose SingleTurnAgent takes none
    setup = agent.setup(state.sandbox, ctx)  # type: ignore[arg-type]
    try:
        await setup_step(state, setup)
    except SetupFailed:
        return False
    return True


def begin_early(
    state: TrialState, agent: Agent, instruction: str, ctx: AgentContext
) -> asyncio.Task[None] | None:
    """Begin the agent's `run_early` now, beside the sandbox's start, when the agent can (single-step tasks in
    a sandbox); its seconds go to the `agent_early` phase."""
    if not (agent.starts_before_sandbox and state.uses_sandbox):
        return None
    started = time.perf_counter()

    def timed(_task: asyncio.Task[None]) -> None:
        state.result.timing.agent_early = time.perf_counter() - started

    early = asyncio.create_task(agent.run_early(instruction, ctx), name=f"{ctx.trial_name}-early")
    early.add_done_callback(timed)
    return early


async def end_early(early: asyncio.Task[None] | None) -> None:
    """Cancel the agent's early work if it is still running (its model call is abandoned) and wait for it;
    its outcome is dropped (the trial already failed for another reason, or `run_agent` consumed it)."""
    if early is None:
        return
    early.cancel()
    await asyncio.gather(early, return_exceptions=True)


async def _after_early(early: asyncio.Task[None] | None, run: Callable[[], Awaitable[T]]) -> T:
    """The rest of the agent's early work, then its run."""
    if early is not None:
        await early
    return await run()


async def run_agent(
    state: TrialState,
    agent: Agent,
    instruction: str,
    ctx: AgentContext,
    limit: float | None,
    early: asyncio.Task[None] | None = None,
) -> bool:
    """`agent.run` bounded by `limit` seconds, after the rest of its `early` work (see `begin_early`); sets
    `agent_finished` (and returns True) when it returned normally, keeping what it reported (metadata, steps,
    usage)."""
    # None only for a Python task without a sandbox, whose SingleTurnAgent takes none
    run = _after_early(early, lambda: agent.run(instruction, state.sandbox, ctx))  # type: ignore[arg-type]
    try:
        result = await state.timed("agent_run", run, limit)
    except TimeoutError:
        message = f"the agent ran past its timeout of {limit:g} s and was killed"
        state.fail(FailureCause.AGENT_TIMEOUT, message)
        return False
    except Exception as exc:
        agent_failed(state, exc, "the agent failed")
        return False
    state.agent_finished = True
    if isinstance(result, AgentResult):
        state.result.agent_metadata = result.metadata
        ctx.trajectory.extend(result.steps)
        if result.usage is not None:
            state.result.usage = result.usage
            state.usage_from_agent = True
    return True
