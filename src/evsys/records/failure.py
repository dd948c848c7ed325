"""Why a trial failed: `FailureCause` (exactly one per failed trial), `TrialFailure` (the cause, a message and
when), and `CausedError`, the base of every error that fails a trial with a cause of its own.

An error class declares its cause once, as a class attribute (`failure_cause = FailureCause.MODEL_ERROR`);
the engine records that cause for it, and retries the trial when the cause is in `RETRYABLE_CAUSES`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import BaseModel, Field, field_serializer

from evsys.records.trajectory import utc_now
from evsys.util.text import safe_text


class FailureCause(StrEnum):
    """Why a trial failed. Exactly one per failed trial."""

    SANDBOX_FAILED = "sandbox_failed"
    AGENT_TIMEOUT = "agent_timeout"
    AGENT_ERROR = "agent_error"
    # the agent's own sandbox hit its limits (memory OOM, pids, full tmpfs): the agent's result, never retried
    AGENT_EXHAUSTED_RESOURCES = "agent_exhausted_resources"
    VERIFIER_TIMEOUT = "verifier_timeout"
    VERIFIER_ERROR = "verifier_error"
    REWARD_MISSING = "reward_missing"
    REWARD_INVALID = "reward_invalid"
    MODEL_ERROR = "model_error"
    TASK_INVALID = "task_invalid"
    ENVIRONMENT_UNSUPPORTED = "environment_unsupported"
    ENVIRONMENT_BUILD_FAILED = "environment_build_failed"
    HEALTHCHECK_FAILED = "healthcheck_failed"
    CANCELLED = "cancelled"
    WORKER_LOST = "worker_lost"  # the remote worker process or node running the trial died


RETRYABLE_CAUSES = frozenset(
    {
        FailureCause.SANDBOX_FAILED,
        FailureCause.MODEL_ERROR,
        FailureCause.AGENT_ERROR,
        FailureCause.WORKER_LOST,
    }
)


class CausedError(Exception):
    """An error that fails a trial with `failure_cause` (subclasses set it; the default is `agent_error`)."""

    failure_cause: ClassVar[FailureCause] = FailureCause.AGENT_ERROR


class TrialFailure(BaseModel):
    """A failure: its cause, a message a user can act on, and when it happened."""

    cause: FailureCause
    message: str
    at: str = Field(default_factory=utc_now)

    @field_serializer("message")
    def _safe_message(self, value: str) -> str:
        return safe_text(value)  # messages quote what the sandbox said and named
