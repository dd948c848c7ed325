"""Multi-step trials (`[[steps]]` in task.toml), run the way Harbor 0.25 runs them.

One sandbox for the whole trial; the agent is set up once. For each step, in order:
1. the step's network (its `[steps.agent]` policy, else the task's) — the sandbox is narrowed or widened back;
2. `steps/<name>/workdir/` is copied into the working directory and its `setup.sh`, if any, runs there (a
   failing setup ends the trial: `task_invalid`);
3. the agent runs on `steps/<name>/instruction.md` with the step's timeout (`[steps.agent] timeout_sec`, else
   the task's, times the job's multiplier: scaled when planned, `TrialConfig.step_timeouts`); after a timeout
   or error its processes are killed, after a normal finish they keep running (into this step's verification
   and the next step);
4. the step's tests run: the task's `tests/` with `steps/<name>/tests/` placed over it, so the step's
   `test.sh` wins; then `/logs` is copied out into `steps/<name>/` of the trial directory and the step's
   reward is read;
5. `/tests` and `/logs/{agent,verifier,artifacts}` are emptied (they stay, as in Harbor) so the next step's
   agent sees neither.
The trial stops early when a step could not be scored, or when its rewards are below its `min_reward` (a
number gates the `reward` key; a table gates each key; a missing key counts as -inf). The trial's reward is
`multi_step_reward_strategy`: `mean` (default: per-key means over the steps that were scored, a key missing
from a step counting 0) or `final` (the last step run's rewards). Step failures are the trial's failures too.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import tempfile
from pathlib import Path

from evsys.agent.base import Agent, AgentContext
from evsys.engine.config import StepTimeouts
from evsys.engine.trial.agent import run_agent, setup_agent
from evsys.engine.trial.environment import kill_leftovers, switch_network
from evsys.engine.trial.state import TrialState
from evsys.engine.trial.verifier import collect_logs, run_in_sandbox
from evsys.records import FailureCause, StepResult
from evsys.sandbox.base import LOGS_DIR, TESTS_DIR, SandboxError
from evsys.task.models import Task, TaskStep
from evsys.task.network import resolve_network_plan
from evsys.verify.base import VerifierError, primary_reward
from evsys.verify.chain import VerifierChain, VerifyContext
from evsys.verify.script import ScriptVerifier, pack_directory

_CLEAN = (  # as Harbor: the directories stay, empty
    f"for d in {TESTS_DIR} {LOGS_DIR}/agent {LOGS_DIR}/verifier {LOGS_DIR}/artifacts; do mkdir -p $d && "
    "find $d -mindepth 1 -maxdepth 1 -exec rm -rf {} +; done"
)


def min_reward_failure(rewards: dict[str, float] | None, min_reward: float | dict[str, float]) -> str | None:
    """Why `rewards` miss a step's `min_reward` (Harbor's gate), or None when they meet it."""
    thresholds = {"reward": min_reward} if isinstance(min_reward, int | float) else min_reward
    for key, threshold in thresholds.items():
        actual = (rewards or {}).get(key, -math.inf)
        if actual < threshold:
            return f"{key} = {actual} is below its min_reward {threshold}"
    return None


def combine_step_rewards(strategy: str | None, steps: list[StepResult]) -> dict[str, float] | None:
    """The trial's rewards from its steps: `final` — the last step run's; `mean` (the default) — per-key
    means over the scored steps, a key a step lacks counting 0. None when nothing was scored."""
    if strategy == "final":
        return dict(steps[-1].rewards) if steps and steps[-1].rewards is not None else None
    scored = [step.rewards for step in steps if step.rewards is not None]
    keys = sorted({key for rewards in scored for key in rewards})
    if not keys:
        return None
    return {key: sum(rewards.get(key, 0.0) for rewards in scored) / len(scored) for key in keys}


def merged_tests(step: TaskStep, scratch: Path) -> Path:
    """One directory with the task's tests/ and the step's tests/ over it (the step's files win)."""
    if len(step.tests_dirs) == 1:
        return step.tests_dirs[0]
    merged = scratch / "tests"
    for source in step.tests_dirs:
        shutil.copytree(source, merged, dirs_exist_ok=True, symlinks=True)
    return merged


async def run_steps(state: TrialState, agent: Agent, task: Task, ctx: AgentContext, trial_dir: Path) -> None:
    """The multi-step driver: set the agent up once, run the steps in order (see the module docstring) and
    combine their rewards into the trial's."""
    steps: list[StepResult] = []
    state.result.steps = steps
    if task.config.verifier.environment_mode == "separate":
        message = "task.toml:verifier.environment_mode: a multi-step task with a separate verifier"
        state.fail(FailureCause.ENVIRONMENT_UNSUPPORTED, message + " is not supported yet")
        return
    if not await setup_agent(state, agent, ctx):  # nothing was run, nothing to score
        return
    for step in task.steps:
        outcome = StepResult(name=step.name)
        steps.append(outcome)
        state.current_step = outcome
        try:
            await run_step(state, agent, task, step, ctx, trial_dir / "steps" / step.name)
        finally:
            state.current_step = None
        if stop_after(state, step, outcome):
            break
    rewards = combine_step_rewards(task.config.multi_step_reward_strategy, steps)
    if rewards is not None:
        state.result.rewards, state.result.reward = rewards, primary_reward(rewards)
    elif state.result.failure is None:
        state.fail(FailureCause.REWARD_MISSING, "no step of the task was scored")


def stop_after(state: TrialState, step: TaskStep, outcome: StepResult) -> bool:
    """True when the trial stops after `step`: its sandbox is lost, it was not scored, or its rewards are
    below its `min_reward` (a warning says so)."""
    if not state.sandbox_alive or (outcome.failure is not None and outcome.rewards is None):
        return True
    if step.config.min_reward is None:
        return False
    below = min_reward_failure(outcome.rewards, step.config.min_reward)
    if below is not None:
        state.result.warnings.append(f"step '{step.name}': {below}; the remaining steps were not run")
    return below is not None


async def run_step(
    state: TrialState, agent: Agent, task: Task, step: TaskStep, ctx: AgentContext, step_dir: Path
) -> None:
    """One step: its network and workdir, the agent on its instruction, its tests, then the clean-up."""
    outcome = step_result(state)
    timeouts = step_timeouts(state, step)
    state.agent_finished = False
    state.network = resolve_network_plan(task.config, step.config, override=state.config.network)
    if not await switch_network(state, state.network.agent, "agent"):
        return
    if not await step_setup(state, task, step):
        return
    solution_dir = step.solution_dir or task.solution_dir
    ctx.task = task.model_copy(update={"instruction": step.instruction, "solution_dir": solution_dir})
    ctx.timeout_sec = timeouts.agent_timeout_sec
    ctx.logs_dir = step_dir / "agent"
    started = state.result.timing.agent_run or 0.0
    await run_agent(state, agent, step.instruction, ctx, ctx.timeout_sec)
    outcome.agent_run = (state.result.timing.agent_run or 0.0) - started
    await verify_step(state, task, step, step_dir)
    await clean_between_steps(state)


def step_result(state: TrialState) -> StepResult:
    """The running step's result."""
    if state.current_step is None:
        raise RuntimeError("no step is running")
    return state.current_step


def step_timeouts(state: TrialState, step: TaskStep) -> StepTimeouts:
    """The step's timeouts as planned (its own, else the task's, scaled by the job's multipliers)."""
    planned = state.config.step_timeouts.get(step.name)
    if planned is not None:
        return planned
    return StepTimeouts(
        agent_timeout_sec=state.config.agent_timeout_sec,
        verifier_timeout_sec=state.config.verifier_timeout_sec,
    )


async def step_setup(state: TrialState, task: Task, step: TaskStep) -> bool:
    """Copy steps/<name>/workdir/ into the working directory and run its setup.sh there (as the agent's
    user); False, with the failure recorded, when that fails."""
    workdir_src = step.dir / "workdir"
    if not workdir_src.is_dir():
        return True
    sandbox = state.require_sandbox()
    workdir = task.environment.workdir
    data = await asyncio.to_thread(pack_directory, workdir_src)
    try:
        copied = await sandbox.exec(f"mkdir -p {workdir} && tar -x -C {workdir} -f -", stdin=data)
        ran = None
        if copied.ok and (workdir_src / "setup.sh").is_file():
            ran = await sandbox.exec(f"bash {workdir}/setup.sh", cwd=workdir)
    except SandboxError as exc:
        message = f"step '{step.name}': preparing the step failed: {exc}"
        state.lose_sandbox(FailureCause.SANDBOX_FAILED, message)
        return False
    failed = copied if not copied.ok else ran if ran is not None and not ran.ok else None
    if failed is not None:
        what = "copying workdir/" if failed is copied else "workdir/setup.sh"
        detail = failed.stderr.strip()[-500:] or f"exit code {failed.exit_code}"
        state.fail(FailureCause.TASK_INVALID, f"steps/{step.name}/{what} failed: {detail}")
        return False
    return True


def step_verifier(task: Task, step: TaskStep, tests_dir: Path, timeout_sec: float | None) -> ScriptVerifier:
    """The step's tests as a `ScriptVerifier`: the step's verifier settings over the task's."""
    return ScriptVerifier(
        tests_dir,
        timeout_sec=timeout_sec,
        env={**task.config.verifier.env, **step.config.verifier.env},
        user=step.config.verifier.user or task.config.verifier.user,
        workdir=task.environment.workdir,
    )


async def verify_step(state: TrialState, task: Task, step: TaskStep, step_dir: Path) -> None:
    """Kill an unfinished agent's leftovers, run the step's tests with the verifier phase's network, copy
    /logs out into the step's directory and read the step's rewards."""
    await kill_leftovers(state)
    outcome = step_result(state)
    timeout = step_timeouts(state, step).verifier_timeout_sec
    with tempfile.TemporaryDirectory(prefix="evsys-step-tests-") as scratch:
        tests_dir = await asyncio.to_thread(merged_tests, step, Path(scratch))
        verifier = step_verifier(task, step, tests_dir, timeout)
        started = state.result.timing.verifier or 0.0
        switched = state.sandbox_alive and await switch_network(state, state.network.verifier, "verifier")
        vctx = VerifyContext(verifier_dir=Path(), sandbox=state.sandbox, timeout_sec=timeout)
        tests_ran = switched and await run_in_sandbox(state, VerifierChain([verifier]), vctx)
        outcome.verifier = (state.result.timing.verifier or 0.0) - started
    seen = state.result.integrity  # a later step's run sees the same writes again
    seen.extend(finding for finding in vctx.integrity if finding not in seen)
    collected = await collect_logs(state, step_dir)
    if not tests_ran:
        return
    if not collected:
        state.fail(FailureCause.VERIFIER_ERROR, f"step '{step.name}': could not copy /logs/verifier out")
        return
    try:
        scored = await verifier.read_rewards(step_dir / "verifier")
    except VerifierError as exc:
        state.fail(FailureCause(exc.failure_cause), f"step '{step.name}': {exc}")
        return
    outcome.rewards, outcome.reward = scored.rewards, scored.reward


async def clean_between_steps(state: TrialState) -> None:
    """Remove this step's tests and logs so the next step's agent sees neither."""
    sandbox = state.live_sandbox
    if sandbox is None:
        return
    try:
        cleaned = await sandbox.exec(_CLEAN, cwd="/", user="root")
    except SandboxError as exc:
        detail = str(exc)
    else:
        if cleaned.ok:
            return
        detail = cleaned.stderr.strip()[-300:]
    state.lose_sandbox(
        FailureCause.SANDBOX_FAILED, f"could not clear /tests and /logs between steps: {detail}"
    )
