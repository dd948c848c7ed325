"""The single-step driver: the agent once on the task's instruction, then the verifier phase.

Agent setup and run (evsys.engine.trial.agent), then — unless a sandbox-free Python task's model call
failed, which leaves nothing to score — the verifier chain: in the agent's sandbox (`verify_in_place`) or,
with `[verifier] environment_mode = "separate"`, in a fresh one (evsys.engine.trial.separate); a repository
row's change is graded in a fresh sandbox prepared while the agent ran (evsys.engine.trial.fresh).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from evsys.agent.base import Agent, AgentContext
from evsys.engine.trial.agent import run_agent, setup_agent
from evsys.engine.trial.environment import kill_leftovers
from evsys.engine.trial.fresh import grade_repository_row, graded_in_fresh_sandbox
from evsys.engine.trial.keep import keep_state
from evsys.engine.trial.separate import verify_separately
from evsys.engine.trial.state import TrialState
from evsys.engine.trial.verifier import verify_in_place
from evsys.task.models import Task
from evsys.verify.chain import VerifyContext, chain_for_task


async def run_single_step(
    state: TrialState,
    agent: Agent,
    task: Task,
    ctx: AgentContext,
    trial_dir: Path,
    early: asyncio.Task[None] | None = None,
) -> None:
    """Set the agent up, run it on the task's instruction (after its `early` work, begun with the sandbox's
    start), then verify."""
    agent_ok = await setup_agent(state, agent, ctx) and await run_agent(
        state, agent, task.instruction, ctx, state.config.agent_timeout_sec, early
    )
    if agent_ok or state.uses_sandbox:  # without a sandbox, a failed model call leaves nothing to score
        await verify(state, task, trial_dir)


async def verify(state: TrialState, task: Task, trial_dir: Path) -> None:
    """The verifier phase after the agent: kill the leftovers of an agent that did not finish, then run the
    task's verifier chain here or in a separate sandbox."""
    chain = chain_for_task(task, state.spec.python_task, state.config.verifier_timeout_sec)
    await kill_leftovers(state)
    await keep_state(state, trial_dir)  # `--keep-state`: what the agent phase left, before the tests run
    vctx = VerifyContext(
        verifier_dir=trial_dir / "verifier",
        sandbox=state.live_sandbox,
        prompt=task.instruction,
        base_dir=task.path,
        timeout_sec=state.config.verifier_timeout_sec,
    )
    if state.uses_sandbox and graded_in_fresh_sandbox(task):  # a repository row
        await grade_repository_row(state, task, chain, vctx, trial_dir)
    elif state.uses_sandbox and task.config.verifier.environment_mode == "separate":
        await verify_separately(state, task, chain, vctx, trial_dir)
    else:
        await verify_in_place(state, task, chain, vctx, trial_dir)
