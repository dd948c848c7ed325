"""The verifier phase of a trial: the verifier chain (evsys.verify.chain, built from the task's config) run
after the agent (evsys.engine.trial.single_step decides where) — its in-sandbox half (the tests, bounded by
the verifier timeout plus a grace), `/logs` copied out in one go (agent/, verifier/, artifacts/), then the
host-side scoring (reward files, verifier functions, rubrics, judges), each link seeing the rewards before it.

After a normal agent finish what the agent started keeps running through verification (a server the task
asked for is checked by tests/test.sh, as in Harbor); after an agent timeout, error or failed setup its
processes are killed first. The tests run with the verifier phase's network (`[verifier] network_mode`),
even after an agent timeout or error, while the sandbox is alive: `verify_in_place` in the agent's sandbox,
evsys.engine.trial.separate in a fresh one. A multi-step task's steps run their tests through
`run_in_sandbox` and `collect_logs` too (evsys.engine.trial.multi_step).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from evsys.engine.logs import copy_logs_out
from evsys.engine.trial.artifacts import collect_artifacts
from evsys.engine.trial.environment import switch_network
from evsys.engine.trial.state import TrialState, describe_exception
from evsys.records import FailureCause
from evsys.repo.report import read_tests_summary
from evsys.sandbox.base import LOGS_DIR, Sandbox, SandboxError
from evsys.task.models import Task
from evsys.verify.base import VerifierError
from evsys.verify.chain import LinkOutcome, VerifierChain, VerifyContext
from evsys.verify.functions import completion_of
from evsys.verify.judge_log import recording_judge_calls

VERIFIER_GRACE_SEC = 30.0


async def verify_in_place(
    state: TrialState, task: Task, chain: VerifierChain, vctx: VerifyContext, trial_dir: Path
) -> None:
    """The chain in the agent's own sandbox: its artifacts copied out, the verifier phase's network, the
    tests, /logs copied out, then scoring."""
    if state.uses_sandbox and task.config.artifacts and state.sandbox_alive:
        await collect_artifacts(state, task, trial_dir / "artifacts")
    if state.uses_sandbox and state.sandbox_alive and chain.needs_sandbox:
        if not await switch_network(state, state.network.verifier, "verifier"):
            vctx.sandbox = None
    ready = await run_in_sandbox(state, chain, vctx) if chain.needs_sandbox else True
    collected = await collect_logs(state, trial_dir) if state.uses_sandbox else True
    if ready and not collected:
        state.fail(FailureCause.VERIFIER_ERROR, "could not copy /logs/verifier out of the sandbox")
    elif ready:
        await score(state, chain, vctx)


async def run_in_sandbox(state: TrialState, chain: VerifierChain, vctx: VerifyContext) -> bool:
    """The chain's in-sandbox half (the tests) in `vctx.sandbox`; False (with the failure recorded) when
    there is no reward to read."""
    timeout = vctx.timeout_sec
    hard_limit = None if timeout is None else timeout + VERIFIER_GRACE_SEC
    if vctx.sandbox is None:
        return False
    try:
        await state.timed("verifier", chain.run_in_sandbox(vctx), hard_limit)
    except TimeoutError:
        state.fail(FailureCause.VERIFIER_TIMEOUT, f"the verifier did not finish within {timeout:g} s")
        return False
    except VerifierError as exc:
        state.fail(FailureCause(exc.failure_cause), str(exc))
        return False
    except Exception as exc:
        state.fail(FailureCause.VERIFIER_ERROR, f"the verifier failed: {describe_exception(exc)}")
        return False
    return True


async def score(state: TrialState, chain: VerifierChain, vctx: VerifyContext) -> None:
    """The chain's host-side half: rewards (or the failing link's error) onto the result, each function
    link's reward / traceback file under verifier/ through the store, every LLM judge call in
    verifier/judge.jsonl, and a repository task's per-test summary."""
    if not chain.links:  # a PromptTask: generation only
        state.result.reward = 0.0
        return
    trajectory = state.recorder.build() if state.recorder is not None else None
    state.scored_trajectory = trajectory  # saved as it was scored (the agent has finished)
    vctx.trajectory, vctx.completion = trajectory, completion_of(trajectory)
    async with recording_judge_calls(vctx.verifier_dir):  # every LLM judge call -> verifier/judge.jsonl
        if chain.needs_sandbox:  # the verifier time is the tests' run, counted while they ran
            outcome = await chain.verify(vctx)
        else:
            outcome = await state.timed("verifier", chain.verify(vctx))
    state.result.warnings.extend(vctx.warnings)
    state.result.integrity.extend(vctx.integrity)
    if state.is_repository_task:  # its grader wrote a per-test report
        state.result.tests_summary = await asyncio.to_thread(read_tests_summary, vctx.verifier_dir)
    for link in outcome.outcomes:
        await record_link(state, link)
    if outcome.error is not None:
        state.result.rewards, state.result.reward = None, None
        state.fail(FailureCause(outcome.error.failure_cause), str(outcome.error))
    elif outcome.final is not None:
        state.result.rewards = dict(outcome.final.rewards)
        state.result.reward = outcome.final.reward


async def record_link(state: TrialState, outcome: LinkOutcome) -> None:
    """A function link's reward file (when it scored) and traceback, under the trial's verifier/."""
    name, result = state.config.trial_name, outcome.result
    if outcome.reward_file and result.ok:
        await state.store.write_trial_file(name, f"verifier/{outcome.reward_file}", result.rewards)
    if result.traceback:
        await state.store.write_trial_file(name, "verifier/traceback.txt", result.traceback)


async def collect_logs(state: TrialState, trial_dir: Path, sandbox: Sandbox | None = None) -> bool:
    """Copy a sandbox's /logs (the trial's, unless another is given) out in one go into `trial_dir`'s
    agent/, verifier/ and artifacts/; False (a warning recorded) when that failed."""
    if sandbox is None:
        sandbox = state.live_sandbox
        if sandbox is None:
            return False
    try:  # bounded, straight into the trial dir, no staging copy
        copy = copy_logs_out(sandbox, LOGS_DIR, trial_dir, state.config.log_limits)
        state.result.warnings += await state.timed("logs_download", copy)
    except (SandboxError, OSError) as exc:
        state.result.warnings.append(f"copying /logs out failed: {exc}")
        return False
    return True
