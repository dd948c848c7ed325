"""Retries with exponential backoff and jitter, honouring Retry-After, for retryable errors only."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from evsys.model.errors import RetryableModelError

T = TypeVar("T")

RetryHook = Callable[[int, RetryableModelError, float], None]
"""Called before each wait with (attempt number that failed, the error, seconds about to be slept)."""


class RetryPolicy(BaseModel):
    """How often and how long to retry: delay n (1-based) is base * 2**(n-1), capped, plus jitter."""

    model_config = ConfigDict(extra="forbid")

    max_attempts: int = Field(5, ge=1, description="Total attempts including the first.")
    base_delay_s: float = Field(0.5, ge=0)
    max_delay_s: float = Field(30.0, ge=0)
    jitter: float = Field(0.25, ge=0, le=1, description="Fraction of the delay added at random.")
    honour_retry_after: bool = True

    def delay_for(self, attempt: int, error: RetryableModelError, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt `attempt` (1-based)."""
        backoff = min(self.max_delay_s, self.base_delay_s * (2 ** (attempt - 1)))
        backoff += backoff * self.jitter * (rng or random).random()
        if self.honour_retry_after and error.retry_after_s is not None:
            backoff = max(backoff, min(error.retry_after_s, self.max_delay_s))
        return backoff


async def call_with_retries(
    call: Callable[[], Awaitable[T]],
    policy: RetryPolicy | None = None,
    on_retry: RetryHook | None = None,
) -> T:
    """Await `call()`; on a `RetryableModelError` wait and try again, up to `policy.max_attempts` attempts.

    Any other exception propagates at once. After the last attempt the last retryable error is raised.
    """
    policy = policy or RetryPolicy()
    attempt = 1
    while True:
        try:
            return await call()
        except RetryableModelError as error:
            if attempt >= policy.max_attempts:
                raise
            delay = policy.delay_for(attempt, error)
            if on_retry is not None:
                on_retry(attempt, error, delay)
            await asyncio.sleep(delay)
            attempt += 1


def parse_retry_after(value: str | None) -> float | None:
    """Parse a Retry-After header given in seconds (HTTP dates are ignored); None when absent or invalid."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
