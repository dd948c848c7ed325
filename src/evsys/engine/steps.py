"""Multi-step trials (`[[steps]]` in task.toml), run the way Harbor 0.25 runs them.

One sandbox for the whole trial; the agent is set up once. For each step, in order:
1. the step's network (its `[steps.agent]` policy, else the task's) — the sandbox is narrowed or widened back;
2. `steps/<name>/workdir/` is copied into the working directory and its `setup.sh`, if any, runs there (a
   failing setup ends the trial: `task_invalid`);
3. the agent runs on `steps/<name>/instruction.md` with the step's timeout (`[steps.agent] timeout_sec`, else
   the task's, times the job's multiplier); after a timeout or error its processes are killed, after a normal
   finish they keep running (into this step's verification and the next step);
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
from evsys.records import FailureCause, StepResult, TrialFailure
from evsys.sandbox.base import LOGS_DIR, TESTS_DIR, SandboxError
from evsys.task.models import Task, TaskStep
from evsys.task.network import resolve_network_plan
from evsys.verify.base import VerifierError, primary_reward
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


def _scaled(step_value: float | None, task_value: float | None, job_value: float | None) -> float | None:
    """A step's own timeout times the job's multiplier (read off the task's scaled one), else the job's."""
    if step_value is None or job_value is None or not task_value:
        return job_value
    return step_value * job_value / task_value


def merged_tests(step: TaskStep, scratch: Path) -> Path:
    """One directory with the task's tests/ and the step's tests/ over it (the step's files win)."""
    if len(step.tests_dirs) == 1:
        return step.tests_dirs[0]
    merged = scratch / "tests"
    for source in step.tests_dirs:
        shutil.copytree(source, merged, dirs_exist_ok=True, symlinks=True)
    return merged


class StepsMixin:
    """The multi-step half of `Trial` (evsys.engine.trial): it uses the trial's agent, network, tests and
    copy-out phases once per step."""

    _current_step: StepResult | None = None

    def _step_failed(self, cause: FailureCause, message: str) -> None:
        step = self._current_step
        if step is not None and step.failure is None:
            step.failure = TrialFailure(cause=cause, message=message)

    async def _run_steps(self, agent: Agent, task: Task, ctx: AgentContext, trial_dir: Path) -> None:
        self.result.steps = []
        if task.config.verifier.environment_mode == "separate":
            message = "task.toml:verifier.environment_mode: a multi-step task with a separate verifier"
            self.fail(FailureCause.ENVIRONMENT_UNSUPPORTED, message + " is not supported yet")
            return
        await self._agent_setup_step(agent.setup(self.sandbox, ctx))
        if self.result.failure is not None:  # setup failed: nothing was run, nothing to score
            return
        for step in task.steps:
            outcome = StepResult(name=step.name)
            self.result.steps.append(outcome)
            self._current_step = outcome
            try:
                await self._run_step(agent, task, step, ctx, trial_dir / "steps" / step.name)
            finally:
                self._current_step = None
            if self._stop_after(step, outcome):
                break
        rewards = combine_step_rewards(task.config.multi_step_reward_strategy, self.result.steps)
        if rewards is not None:
            self.result.rewards, self.result.reward = rewards, primary_reward(rewards)
        elif self.result.failure is None:
            self.fail(FailureCause.REWARD_MISSING, "no step of the task was scored")

    def _stop_after(self, step: TaskStep, outcome: StepResult) -> bool:
        if not self.sandbox_alive or (outcome.failure is not None and outcome.rewards is None):
            return True
        if step.config.min_reward is None:
            return False
        below = min_reward_failure(outcome.rewards, step.config.min_reward)
        if below is not None:
            self.result.warnings.append(f"step '{step.name}': {below}; the remaining steps were not run")
        return below is not None

    async def _run_step(
        self, agent: Agent, task: Task, step: TaskStep, ctx: AgentContext, step_dir: Path
    ) -> None:
        self.agent_finished = False
        self.network = resolve_network_plan(task.config, step.config, override=self.config.network)
        if not await self._switch_network(self.network.agent, "agent") or not await self._step_setup(
            task, step
        ):
            return
        ctx.task = task.model_copy(
            update={"instruction": step.instruction, "solution_dir": step.solution_dir or task.solution_dir}
        )
        ctx.timeout_sec = _scaled(
            step.config.agent.timeout_sec, task.config.agent.timeout_sec, self.config.agent_timeout_sec
        )
        ctx.logs_dir = step_dir / "agent"
        started = self.result.timing.agent_run or 0.0
        await self._agent_turn(agent, step.instruction, ctx, ctx.timeout_sec)
        self._current_step.agent_run = (self.result.timing.agent_run or 0.0) - started
        await self._verify_step(task, step, step_dir)
        await self._clean_between_steps()

    async def _step_setup(self, task: Task, step: TaskStep) -> bool:
        """Copy steps/<name>/workdir/ into the working directory and run its setup.sh there (as the agent's
        user); False, with the failure recorded, when that fails."""
        workdir_src = step.dir / "workdir"
        if not workdir_src.is_dir():
            return True
        workdir = task.environment.workdir
        data = await asyncio.to_thread(pack_directory, workdir_src)
        try:
            copied = await self.sandbox.exec(f"mkdir -p {workdir} && tar -x -C {workdir} -f -", stdin=data)
            ran = None
            if copied.ok and (workdir_src / "setup.sh").is_file():
                ran = await self.sandbox.exec(f"bash {workdir}/setup.sh", cwd=workdir)
        except SandboxError as exc:
            self.sandbox_alive = False
            self.fail(FailureCause.SANDBOX_FAILED, f"step '{step.name}': preparing the step failed: {exc}")
            return False
        failed = copied if not copied.ok else ran if ran is not None and not ran.ok else None
        if failed is not None:
            what = "copying workdir/" if failed is copied else "workdir/setup.sh"
            detail = failed.stderr.strip()[-500:] or f"exit code {failed.exit_code}"
            self.fail(FailureCause.TASK_INVALID, f"steps/{step.name}/{what} failed: {detail}")
            return False
        return True

    async def _verify_step(self, task: Task, step: TaskStep, step_dir: Path) -> None:
        if self.sandbox_alive and not self.agent_finished:
            try:
                await self.sandbox.kill_processes()
            except SandboxError as exc:
                self.sandbox_alive = False
                self.fail(FailureCause.SANDBOX_FAILED, f"could not kill the agent's processes: {exc}")
        outcome = self._current_step
        with tempfile.TemporaryDirectory(prefix="evsys-step-tests-") as scratch:
            verifier = ScriptVerifier(
                await asyncio.to_thread(merged_tests, step, Path(scratch)),
                timeout_sec=_scaled(
                    step.config.verifier.timeout_sec,
                    task.config.verifier.timeout_sec,
                    self.config.verifier_timeout_sec,
                ),
                env={**task.config.verifier.env, **step.config.verifier.env},
                user=step.config.verifier.user or task.config.verifier.user,
                workdir=task.environment.workdir,
            )
            started = self.result.timing.verifier or 0.0
            switched = self.sandbox_alive and await self._switch_network(self.network.verifier, "verifier")
            tests_ran = switched and await self._run_tests(verifier)
            outcome.verifier = (self.result.timing.verifier or 0.0) - started
        collected = await self._collect_logs(step_dir)
        if not tests_ran:
            return
        if not collected:
            self.fail(FailureCause.VERIFIER_ERROR, f"step '{step.name}': could not copy /logs/verifier out")
            return
        try:
            scored = await verifier.read_rewards(step_dir / "verifier")
        except VerifierError as exc:
            self.fail(FailureCause(exc.cause), f"step '{step.name}': {exc}")
            return
        outcome.rewards, outcome.reward = scored.rewards, scored.reward

    async def _clean_between_steps(self) -> None:
        """Remove this step's tests and logs so the next step's agent sees neither."""
        if not self.sandbox_alive:
            return
        try:
            cleaned = await self.sandbox.exec(_CLEAN, cwd="/", user="root")
        except SandboxError as exc:
            cleaned = None
            detail = str(exc)
        else:
            detail = cleaned.stderr.strip()[-300:]
        if cleaned is None or not cleaned.ok:
            self.sandbox_alive = False
            message = f"could not clear /tests and /logs between steps: {detail}"
            self.fail(FailureCause.SANDBOX_FAILED, message)
