"""Failures the agent causes are its own: a trial whose sandbox hit its own limits (memory, pids, a full
tmpfs) ends as `agent_exhausted_resources` with reward 0, never retried.

Asked once the phases are over, before the sandbox is released: `Sandbox.exhausted_limits()` reports what the
kernel counted since the sandbox was started or reset for this trial (so the agent's phase and the verifier
phase it may have starved). Any hit makes the trial the agent's failure, whatever the phases recorded
(a `verifier_error` when the verifier could not fork, a retryable `sandbox_failed` when the sandbox was
OOM-killed, or a reward): the failure message and an `IntegrityFinding` carry the counters. A failure evsys
caused without the sandbox reaching a limit (the daemon crashed on its own, the host ran out of memory) is
left as it was, retryable where it was.
"""

from __future__ import annotations

from evsys.engine.trial.state import TrialState, describe_exception
from evsys.records import FailureCause, TrialFailure
from evsys.records.integrity import IntegrityFinding, IntegrityKind

# failures that are not about what ran in the sandbox: kept as they are
KEPT = frozenset(
    {
        FailureCause.CANCELLED,
        FailureCause.TASK_INVALID,
        FailureCause.ENVIRONMENT_UNSUPPORTED,
        FailureCause.ENVIRONMENT_BUILD_FAILED,
        FailureCause.HEALTHCHECK_FAILED,
    }
)


async def judge_exhaustion(state: TrialState) -> None:
    """Make the trial `agent_exhausted_resources` (reward 0, evidence recorded) when its sandbox hit its own
    limits during the trial."""
    sandbox, result = state.sandbox, state.result
    if sandbox is None or result.cause in KEPT:
        return
    try:
        evidence = await sandbox.exhausted_limits()
    except Exception as exc:  # the counters are evidence, never a reason to fail a trial
        result.warnings.append(f"reading the sandbox's limit counters failed: {describe_exception(exc)}")
        return
    if not evidence:
        return
    text = "; ".join(evidence)
    result.integrity.append(
        IntegrityFinding(kind=IntegrityKind.AGENT_EXHAUSTED_RESOURCES, evidence=text, source="sandbox")
    )
    message = f"the agent's sandbox hit its own limits: {text}"
    if result.failure is not None:
        message += f" (the trial had failed with {result.failure.cause.value}: {result.failure.message})"
    result.failure = TrialFailure(cause=FailureCause.AGENT_EXHAUSTED_RESOURCES, message=message)
    result.rewards = {key: 0.0 for key in result.rewards or {"reward": 0.0}}
    result.reward = 0.0
