"""Which failed trials a job retries, and how long it waits before each retry."""

from __future__ import annotations

import random

from evsys.records import RETRYABLE_CAUSES, FailureCause


def retry_delay(retry_index: int, min_wait: float, max_wait: float) -> float:
    """Seconds to wait before retry number `retry_index` (0-based): exponential, capped, 50-100 % jitter."""
    base = min(max_wait, min_wait * 2.0**retry_index)
    return base * (0.5 + random.random() / 2)


def is_retryable(cause: FailureCause | None) -> bool:
    """True for the causes a job retries: sandbox_failed, model_error, agent_error, worker_lost."""
    return cause in RETRYABLE_CAUSES
