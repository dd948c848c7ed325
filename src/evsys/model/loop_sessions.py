"""`LoopSessions`: one aiohttp `ClientSession` per event loop for a client that may be used from several.

aiohttp binds a session (and its pooled connections) to the event loop it was made on. A model client lives
longer than one loop when a caller runs `asyncio.run(...)` per batch (a trainer's rollout step) or from
several threads, so it keeps one session per loop: made on first use there, closed by `aclose()` on that loop
or, at the latest, when the loop shuts down — `asyncio.run` and `asyncio.Runner` close every async generator
of a loop before they close it, and each session is held open by one (`_held_open`). No session is left for
the garbage collector, which is what aiohttp's "Unclosed client session" / "Unclosed connector" warnings say.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable

import aiohttp

Keeper = AsyncGenerator[None, None]


class LoopSessions:
    """The `ClientSession` of the running event loop, made by `make` on first use (see the module
    docstring)."""

    def __init__(self, make: Callable[[], aiohttp.ClientSession]) -> None:
        self._make = make
        self._open: dict[asyncio.AbstractEventLoop, tuple[aiohttp.ClientSession, Keeper]] = {}

    async def get(self) -> aiohttp.ClientSession:
        """The running loop's session (a new one when it has none or it was closed)."""
        loop = asyncio.get_running_loop()
        held = self._open.get(loop)
        if held is not None and not held[0].closed:
            return held[0]
        session = self._make()
        keeper = self._held_open(loop, session)
        await anext(keeper)  # the loop now knows the generator: its shutdown closes the session
        self._open[loop] = (session, keeper)
        return session

    async def _held_open(self, loop: asyncio.AbstractEventLoop, session: aiohttp.ClientSession) -> Keeper:
        try:
            yield
        finally:
            held = self._open.get(loop)
            if held is not None and held[0] is session:
                del self._open[loop]
            await session.close()

    async def aclose(self) -> None:
        """Close the running loop's session now (the sessions of other loops close when those loops end)."""
        held = self._open.pop(asyncio.get_running_loop(), None)
        if held is not None:
            with contextlib.suppress(RuntimeError):  # the generator is being closed already
                await held[1].aclose()
            await held[0].close()
