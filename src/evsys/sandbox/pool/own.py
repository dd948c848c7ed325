"""`OwnSandboxes`: leases that are whole sandboxes, kept by the reuse and warm policies — a reset one first,
then a warm one, then one being reset right now (milliseconds), else a newly started one; at most
`max_sandboxes` leased at once (an `acquire` past that waits for a release)."""

from __future__ import annotations

import asyncio
from functools import partial

from evsys.records import SandboxSpec
from evsys.sandbox.base import Sandbox
from evsys.sandbox.pool.lease import Lease
from evsys.sandbox.pool.policies import ReusePolicy, WarmPolicy
from evsys.sandbox.pool.reuse import IdleSandboxes
from evsys.sandbox.pool.starter import Starter, stop_all
from evsys.sandbox.pool.warm import WarmKeeper


class OwnSandboxes:
    """One lease, one sandbox (see the module docstring)."""

    def __init__(
        self, starter: Starter, reuse: ReusePolicy, warm: WarmPolicy, max_sandboxes: int | None
    ) -> None:
        self.starter = starter
        self.idle = IdleSandboxes(reuse, starter)
        self.warm = WarmKeeper(warm, starter.start)
        self._room = asyncio.Semaphore(max_sandboxes) if max_sandboxes is not None else None
        self.waiting = 0  # acquires waiting at max_sandboxes
        self._leased: set[Sandbox] = set()  # handed out, not given back yet (`close` stops them)

    @property
    def idle_count(self) -> int:
        """Sandboxes waiting for their next holder (reset ones and warm ones)."""
        return self.idle.count + self.warm.ready_count

    @property
    def shared(self) -> list[Sandbox]:
        """None: every lease is a whole sandbox."""
        return []

    async def lease(self, spec: SandboxSpec) -> Lease:
        """A whole sandbox for `spec`, renamed to it when it is a kept one."""
        key = self.idle.policy.admits.key(spec)
        await self._enter()
        try:
            sandbox, reused = await self._sandbox(spec, key)
        except BaseException:
            self._leave()
            raise
        self._leased.add(sandbox)
        return Lease(sandbox, partial(self._give_back, sandbox, key), reused=reused)

    async def _sandbox(self, spec: SandboxSpec, key: str | None) -> tuple[Sandbox, bool]:
        kept = self.idle.take(spec, key)
        self.warm.want(spec)  # kept warm from now, whichever sandbox this lease gets
        if kept is not None:
            return kept, True
        warm = self.warm.take(spec)
        if warm is not None:
            return warm, False
        kept = await self.idle.await_reset(spec, key)
        if kept is not None:
            return kept, True
        return await self.starter.start(spec), False

    async def _enter(self) -> None:
        if self._room is None:
            return
        self.waiting += 1
        try:
            await self._room.acquire()
        finally:
            self.waiting -= 1

    def _leave(self) -> None:
        if self._room is not None:
            self._room.release()

    async def _give_back(
        self, sandbox: Sandbox, key: str | None, reusable: bool, wait: bool, cleaned: bool
    ) -> None:
        if sandbox not in self._leased:
            return  # stopped by `close` already
        self._leased.discard(sandbox)
        try:  # with max_sandboxes the room is given back once the reset is done
            await self.idle.give_back(sandbox, key, reusable=reusable, wait=wait or self._room is not None)
        finally:
            self._leave()

    def prewarm(self, spec: SandboxSpec) -> None:
        """Start the warm sandboxes of `spec` now, ahead of its first lease (no-op without warm ones)."""
        self.warm.want(spec)

    async def fill(self, spec: SandboxSpec) -> None:
        """Start the warm sandboxes of `spec` now (`prewarm`)."""
        self.prewarm(spec)

    async def close(self) -> None:
        """Stop the warm sandboxes, wait for the resets in flight, stop every idle sandbox and every one
        still leased (a later `release` of those does nothing)."""
        leased, self._leased = list(self._leased), set()  # those leased from now are stopped on release
        await self.warm.close()
        await self.idle.close()
        await stop_all(leased)
