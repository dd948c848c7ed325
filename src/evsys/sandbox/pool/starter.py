"""`Starter`: starts a pool's sandboxes without ever losing one to a cancellation, and stops them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from evsys.records import SandboxSpec
from evsys.sandbox.base import Sandbox

log = logging.getLogger(__name__)


class Starter:
    """Makes sandboxes with `factory`, starts them (`start`) and stops them, in the background too
    (`stop_later`; `settle` waits for those)."""

    def __init__(self, factory: Callable[[SandboxSpec], Sandbox]) -> None:
        self.factory = factory
        self.started = 0
        self._stopping: set[asyncio.Future[None]] = set()

    async def start(self, spec: SandboxSpec) -> Sandbox:
        """A newly started sandbox, bounded by the caller's cancellation (a timeout too) without ever losing
        one: a start that finishes as the caller gives up, or that is cancelled too late, is stopped here."""
        starting = asyncio.ensure_future(self._start(spec))
        try:
            return await asyncio.shield(starting)
        except BaseException:
            starting.cancel()
            try:
                sandbox = await starting
            except BaseException:  # the start was abandoned: nothing runs
                sandbox = None
            if sandbox is not None:
                await asyncio.shield(self.stop_later(sandbox))
            raise

    async def _start(self, spec: SandboxSpec) -> Sandbox:
        sandbox = self.factory(spec)
        await sandbox.start()
        self.started += 1
        return sandbox

    def stop_later(self, sandbox: Sandbox) -> asyncio.Future[None]:
        """Stop `sandbox` in the background (`settle` waits for it); failures are logged."""
        stopping = asyncio.ensure_future(sandbox.stop())
        self._stopping.add(stopping)
        stopping.add_done_callback(self._stopped)
        return stopping

    def _stopped(self, task: asyncio.Future[None]) -> None:
        self._stopping.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("stopping a sandbox failed: %s", task.exception())

    async def settle(self) -> None:
        """Wait for the stops under way."""
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)


async def stop_all(sandboxes: list[Sandbox]) -> None:
    """Stop every sandbox, logging (never raising) the failures."""
    results = await asyncio.gather(*(sb.stop() for sb in sandboxes), return_exceptions=True)
    for sandbox, result in zip(sandboxes, results, strict=True):
        if isinstance(result, BaseException):
            with contextlib.suppress(Exception):
                log.warning("stopping idle sandbox %s failed: %s", sandbox.spec.name, result)
