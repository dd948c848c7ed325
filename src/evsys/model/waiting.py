"""Time a model request waits for an in-process engine (its model loading, or the queue before its prefill
starts): not the caller's doing, so whoever bounds the caller's time may leave it out.

The caller's bound installs a `WaitClock` with `pausing(clock)`; an engine calls `model_wait()` when a request
starts waiting and the returned function when the wait ends (from the event loop thread). The trial's agent
timeout is such a bound: it is paused while one of the agent's requests waits for the local engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol


class WaitClock(Protocol):
    """Something that stops counting while a model request waits."""

    def begin_wait(self) -> Callable[[], None]:
        """A request started waiting; call the returned function (idempotent) when the wait ends."""
        ...


_CLOCK: ContextVar[WaitClock | None] = ContextVar("evsys_model_wait_clock", default=None)


@contextmanager
def pausing(clock: WaitClock) -> Iterator[None]:
    """Within this block (and the tasks it starts), model waits pause `clock`."""
    token = _CLOCK.set(clock)
    try:
        yield
    finally:
        _CLOCK.reset(token)


def model_wait() -> Callable[[], None]:
    """Report that a model request starts waiting; the returned function ends the wait (idempotent)."""
    clock = _CLOCK.get()
    return clock.begin_wait() if clock is not None else _nothing


def _nothing() -> None:
    return None
