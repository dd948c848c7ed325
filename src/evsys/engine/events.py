"""A job's event stream: what happens while its trials run, for whoever subscribes (`evsys run`'s progress).

`JobEvents.emit(event)` calls every subscriber with the event, in subscription order, on the caller's thread
(the event loop of the job's trials: a subscriber must not block). A subscriber that raises is logged and
kept; the job goes on. Events:

- `BuildProgress(task, line)`: a line an image build of `task` printed; `line=None` when that build ended
  (built, cached or failed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

log = logging.getLogger(__name__)


class BuildProgress(BaseModel):
    """An image build's progress: a line it printed (`line`), or its end (`line=None`)."""

    model_config = ConfigDict(frozen=True)

    task: str
    line: str | None = None


JobEvent = BuildProgress
Subscriber = Callable[[JobEvent], None]


class JobEvents:
    """A job's event stream: `subscribe` a callback, `emit` events to every subscriber."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call `subscriber` with every event from now on; returns the function that unsubscribes it."""
        self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)

        return unsubscribe

    def emit(self, event: JobEvent) -> None:
        """Hand `event` to every subscriber (one that raises is logged, and the others still get it)."""
        for subscriber in list(self._subscribers):
            try:
                subscriber(event)
            except Exception:
                log.exception("a subscriber of the job's events failed on %r", event)
