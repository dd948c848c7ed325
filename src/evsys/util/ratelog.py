"""Logging a recurring problem at a bounded rate: a flood of the same error (a sandbox hammering a server)
costs one log line per interval, never a traceback per occurrence."""

from __future__ import annotations

import logging
import time


class BoundedLog:
    """At most one record per `key` every `interval` seconds, saying how many were suppressed since."""

    def __init__(self, logger: logging.Logger, interval: float = 10.0) -> None:
        self.logger = logger
        self.interval = interval
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def warning(self, key: str, message: str) -> bool:
        """Log `message` (no traceback) unless `key` was logged less than `interval` ago; True if logged."""
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        self._last[key] = now
        suppressed = self._suppressed.pop(key, 0)
        more = f" ({suppressed} more like it in the last {now - last:.0f} s)" if suppressed and last else ""
        self.logger.warning("%s%s", message, more)
        return True
