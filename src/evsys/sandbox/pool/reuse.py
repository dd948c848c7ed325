"""`IdleSandboxes`: the reuse policy at work — released sandboxes reset and kept for the next holder of an
equal spec (ReusePolicy: `max_idle`, `demand`; docs/sandbox.md "Reuse between trials").

A released sandbox is given a place among the idle now, while its holder still counts among the pool's users
(`demand`), then reset (every process killed, a fresh root, /tmp, /dev, IPC and network; see reset.py) and
kept; it is stopped instead when it cannot be reset, when its holder says it went wrong, or when enough are
idle already. A reset may run in the background (`wait=False`): the next acquire of its spec waits for it
rather than starting another sandbox. Only backends declaring `Capability.RESET` are kept.
"""

from __future__ import annotations

import asyncio
import logging

from evsys.records import SandboxSpec
from evsys.sandbox.base import Capability, Sandbox, SandboxError
from evsys.sandbox.pool.policies import ReusePolicy
from evsys.sandbox.pool.starter import Starter, stop_all

log = logging.getLogger(__name__)


class IdleSandboxes:
    """Reset sandboxes by `pool_key`, waiting for their next holder, and the resets under way."""

    def __init__(self, policy: ReusePolicy, starter: Starter) -> None:
        self.policy = policy
        self.starter = starter
        self._idle: dict[str, list[Sandbox]] = {}
        self._releasing: set[asyncio.Future[None]] = set()
        self._resetting = 0  # releases being reset now: places among the idle already taken
        self._inflight: dict[str, int] = {}  # background resets in flight by key
        self._awaiting: dict[str, int] = {}  # acquires waiting for one of them, by key
        self._landed = asyncio.Event()  # set (and replaced) each time a reset ends
        self.closed = False
        self.reused = 0

    @property
    def count(self) -> int:
        """Reset sandboxes waiting for their next holder."""
        return sum(len(group) for group in self._idle.values())

    def take(self, spec: SandboxSpec, key: str | None) -> Sandbox | None:
        """An idle sandbox of `key`, renamed to `spec`, or None."""
        if self.closed:
            raise SandboxError("the sandbox pool is closed")
        idle = self._idle.get(key or "")
        if key is None or not idle:
            return None
        sandbox = idle.pop()
        sandbox.spec = spec  # the same sandbox under its new holder's name
        self.reused += 1
        return sandbox

    async def await_reset(self, spec: SandboxSpec, key: str | None) -> Sandbox | None:
        """An idle sandbox for `key` once one of its resets in flight ends, while more of them are in flight
        than acquires already wait for; None when there is none to wait for (or it could not be reset)."""
        while key is not None and self._inflight.get(key, 0) > self._awaiting.get(key, 0):
            landed = self._landed
            self._awaiting[key] = self._awaiting.get(key, 0) + 1
            try:
                await landed.wait()
            except asyncio.CancelledError:
                self._awaiting[key] -= 1
                self._stop_surplus()  # what was kept for this acquire past max_idle
                raise
            self._awaiting[key] -= 1
            sandbox = self.take(spec, key)
            if sandbox is not None:
                return sandbox
        return None

    def _stop_surplus(self) -> None:
        """Stop (in the background; `close` waits) idle sandboxes past `max_idle` that were kept for acquires
        which no longer wait (cancelled); a reset still in flight is checked when it lands."""
        idle = [(key, sandbox) for key, group in self._idle.items() for sandbox in group]
        surplus = len(idle) - self.policy.max_idle - sum(self._awaiting.values())
        for key, sandbox in idle[: max(0, surplus)]:
            self._idle[key].remove(sandbox)
            self._track(self.starter.stop_later(sandbox))

    async def give_back(self, sandbox: Sandbox, key: str | None, *, reusable: bool, wait: bool) -> None:
        """Reset `sandbox` and keep it, or stop it (see the module doc). `wait=False`: one that is kept is
        handed back at once and reset in the background; one that is not is stopped before this returns."""
        key = key if self._has_room(sandbox, key, reusable) else None
        if key is not None and not wait:
            self._inflight[key] = self._inflight.get(key, 0) + 1  # counted now: the next acquire waits for it
            self._track(asyncio.ensure_future(self._reset_in_flight(sandbox, key)))
            return
        task = asyncio.current_task()
        if task is not None:
            self._releasing.add(task)
        try:
            if key is None or not await self._reset_into_idle(sandbox, key):
                await sandbox.stop()
        finally:
            self._releasing.discard(task)

    def _has_room(self, sandbox: Sandbox, key: str | None, reusable: bool) -> bool:
        """Whether `sandbox` is given an idle place (counted among the resets under way from now): not when
        it is not reusable, cannot be reset, the pool closed, or there is no room."""
        if not reusable or key is None or not sandbox.supports(Capability.RESET) or self.closed:
            return False
        demand = self.policy.demand
        room = self.policy.max_idle if demand is None else min(self.policy.max_idle, demand())
        # resets in flight count (a burst keeps `room`, not all of itself), except those acquires already
        # wait for: those go to holders that have started, which `demand` no longer counts
        if self.count + self._resetting - sum(self._awaiting.values()) >= room:
            return False
        self._resetting += 1
        return True

    async def _reset_into_idle(self, sandbox: Sandbox, key: str) -> bool:
        """Reset a sandbox given a place and keep it idle; False when the reset failed or the pool closed (or
        its acquire left) meanwhile."""
        try:
            await sandbox.reset()
        except SandboxError as exc:
            log.debug("not reusing %s: %s", sandbox.spec.name, exc)
            return False
        finally:
            self._resetting -= 1
        if self.closed or self.count >= self.policy.max_idle + sum(self._awaiting.values()):
            return False
        self._idle.setdefault(key, []).append(sandbox)
        return True

    async def _reset_in_flight(self, sandbox: Sandbox, key: str) -> None:
        try:
            if not await self._reset_into_idle(sandbox, key):
                await sandbox.stop()
        finally:  # kept (idle) or stopped by now; acquires waiting for it look again
            self._inflight[key] -= 1
            landed, self._landed = self._landed, asyncio.Event()
            landed.set()

    def _track(self, task: asyncio.Future[None]) -> None:
        self._releasing.add(task)
        task.add_done_callback(self._released_later)

    def _released_later(self, task: asyncio.Future[None]) -> None:
        self._releasing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("releasing a sandbox failed: %s", task.exception())

    async def close(self) -> None:
        """Wait for the releases in flight, then stop every idle sandbox; later releases stop theirs."""
        self.closed = True
        pending = self._releasing - {asyncio.current_task()}
        if pending:
            await asyncio.wait(pending)
        idle = [sb for group in self._idle.values() for sb in group]
        self._idle.clear()
        await stop_all(idle)
