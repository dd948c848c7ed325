"""Closing what runs on a private event loop when the interpreter exits, while it still can.

`atexit` callbacks run too late for a loop that waits on worker threads: before them, the interpreter's
threading shutdown calls `concurrent.futures`' own exit hook, after which no thread pool accepts work
(`RuntimeError: cannot schedule new futures after interpreter shutdown`), so `asyncio.to_thread` fails and
whatever a close had left to write (a job's result.json) is never written. Callbacks registered here run in
that same threading shutdown step, before the thread pools stop (its hooks run last-registered first, and
`concurrent.futures` registers its hook when it is first imported, long before any evsys object exists).

This uses `threading._register_atexit`, the hook `concurrent.futures` itself relies on (CPython 3.9 and
later); once shutdown has begun, the callback goes to `atexit` instead.
"""

from __future__ import annotations

import atexit
import concurrent.futures.thread  # noqa: F401  (its exit hook is registered first, so it runs after ours)
import threading
from collections.abc import Callable


def close_at_exit(close: Callable[[], None]) -> None:
    """Call `close()` when the interpreter exits, before thread pools shut down (see the module docstring).
    `close` must be safe to call twice: a caller closing early is the normal case."""
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        try:
            register(close)
            return
        except RuntimeError:  # shutdown has already begun
            pass
    atexit.register(close)
