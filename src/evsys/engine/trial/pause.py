"""A trial's time limit that stops counting while one of its model requests waits for the engine.

A local model shared by concurrent trials serves them in turn: time a request spends waiting for the model to
load or in the engine's queue is time the agent could not use, so it is added back to the deadline (see
`evsys.model.waiting`). Generation itself, tool calls and everything else count as usual.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class PausableTimeout:
    """Pauses an `asyncio.Timeout` while at least one model wait is under way, then moves the deadline on by
    the paused time."""

    def __init__(self, timeout: asyncio.Timeout) -> None:
        self.timeout = timeout
        self.waiting = 0
        self.deadline: float | None = None
        self.paused_at = 0.0
        self.paused_s = 0.0
        self.active = True  # False once its block has ended: later waits are not its business

    def begin_wait(self) -> Callable[[], None]:
        """Stop the clock (if it runs); the returned function starts it again once every wait has ended."""
        if not self.active:
            return _nothing
        loop = asyncio.get_running_loop()
        if self.waiting == 0 and not self.timeout.expired():
            self.deadline, self.paused_at = self.timeout.when(), loop.time()
            self.timeout.reschedule(None)
        self.waiting += 1
        ended = False

        def end() -> None:
            nonlocal ended
            if ended:
                return
            ended = True
            self.waiting -= 1
            if self.active and self.waiting == 0 and self.deadline is not None and not self.timeout.expired():
                paused = loop.time() - self.paused_at
                self.paused_s += paused
                self.timeout.reschedule(self.deadline + paused)
                self.deadline = None

        return end


def _nothing() -> None:
    return None
