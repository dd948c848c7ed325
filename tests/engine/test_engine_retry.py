"""Retry policy: which causes are retried, and the backoff grows and stays within its bounds."""

from __future__ import annotations

from evsys.engine import is_retryable, retry_delay
from evsys.records import FailureCause


def test_only_transient_causes_are_retried():
    retried = {c for c in FailureCause if is_retryable(c)}
    assert retried == {
        FailureCause.SANDBOX_FAILED,
        FailureCause.MODEL_ERROR,
        FailureCause.AGENT_ERROR,
        FailureCause.WORKER_LOST,
    }
    for never in (
        "agent_timeout",
        "verifier_timeout",
        "reward_missing",
        "reward_invalid",
        "task_invalid",
        "environment_unsupported",
        "cancelled",
    ):
        assert not is_retryable(FailureCause(never))
    assert not is_retryable(None)


def test_backoff_is_exponential_with_jitter_and_capped():
    for index, base in enumerate([1.0, 2.0, 4.0, 8.0]):
        delays = [retry_delay(index, 1.0, 30.0) for _ in range(50)]
        assert all(base * 0.5 <= d <= base for d in delays)
        assert len(set(delays)) > 1  # jittered
    assert all(retry_delay(10, 1.0, 30.0) <= 30.0 for _ in range(50))
