"""`[verifier] environment_mode = "separate"`: the tests run in a fresh sandbox, not the agent's.

As Harbor 0.25 does it: after the agent, its `/logs` is copied out (agent/, artifacts/) and each declared
`artifacts` entry is copied out of the agent's sandbox into the trial's `artifacts/<destination or base
name>` (evsys.engine.trial.artifacts); then a fresh sandbox of the same environment (the verifier phase's
network, none of the agent's binds) receives those artifacts at their original paths and `/logs/artifacts`,
the tests run there, and its `/logs/verifier` is the one scored. Nothing else of the agent's sandbox — files
it changed, processes it left — reaches the verifier. The verifier's sandbox comes from the same pool and is
released (reset for reuse) when the verification is over.

`verify_separately` is the whole of it; `verify_in` is the part inside the fresh sandbox.
"""

from __future__ import annotations

from pathlib import Path

from evsys.engine.trial.artifacts import collect_artifacts
from evsys.engine.trial.fresh import fresh_sandbox
from evsys.engine.trial.state import TrialState
from evsys.engine.trial.verifier import collect_logs, run_in_sandbox, score
from evsys.records import FailureCause
from evsys.sandbox.base import ARTIFACTS_DIR, Sandbox, SandboxError
from evsys.task.models import Task
from evsys.verify.chain import VerifierChain, VerifyContext


async def verify_separately(
    state: TrialState, task: Task, chain: VerifierChain, vctx: VerifyContext, trial_dir: Path
) -> None:
    """Copy the agent's /logs and artifacts out, then run the chain's in-sandbox half in a fresh sandbox
    that received them, copy its /logs out and score."""
    agent_sandbox = state.live_sandbox
    if agent_sandbox is None or not await collect_logs(state, trial_dir):
        state.fail(FailureCause.SANDBOX_FAILED, "the agent's sandbox was lost before verification")
        return
    artifacts = await collect_artifacts(state, task, trial_dir / "artifacts")
    async with fresh_sandbox(state) as fresh:  # evsys.engine.trial.fresh
        if fresh is not None:
            fresh.reusable = await verify_in(state, fresh.sandbox, chain, vctx, artifacts, trial_dir)


async def verify_in(
    state: TrialState,
    sandbox: Sandbox,
    chain: VerifierChain,
    vctx: VerifyContext,
    artifacts: list[tuple[str, Path]],
    trial_dir: Path,
) -> bool:
    """Place the artifacts in `sandbox`, run the tests there, copy its /logs out and score; True when the
    sandbox is fit for reuse."""
    try:
        logs_artifacts = trial_dir / "artifacts"
        if logs_artifacts.is_dir():
            await sandbox.upload(logs_artifacts, ARTIFACTS_DIR)
        for source, host_copy in artifacts:
            await sandbox.upload(host_copy, source)
    except SandboxError as exc:
        state.fail(FailureCause.SANDBOX_FAILED, f"placing the artifacts in the verifier's sandbox: {exc}")
        return False
    vctx.sandbox = sandbox
    if not await run_in_sandbox(state, chain, vctx):
        return True
    if not await collect_logs(state, trial_dir, sandbox):
        state.fail(FailureCause.VERIFIER_ERROR, "could not copy /logs/verifier out of the verifier's sandbox")
        return False
    await score(state, chain, vctx)
    return True
