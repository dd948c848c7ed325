"""SandboxPool: started sandboxes kept between trials and reset in between ("slots", docs/sandbox.md).

A trial acquires a sandbox for its spec: an idle one started for an equal spec (everything but the name),
already reset when its previous trial ended, or else a newly started one. At the end of the trial it is
released: reset (every process killed, a fresh root, /tmp, /dev and IPC namespace; see reset.py) and kept
for the next trial of the same spec, or stopped when it cannot be reset, when the trial went wrong in the
sandbox, or when enough sandboxes are idle already. Only backends declaring `Capability.RESET` (the local
one) are kept; with any other backend every trial gets a newly started sandbox and the old one is stopped.
With `warm=N` the pool also keeps N started sandboxes per spec ready ahead of demand (warm.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from evsys.records import SandboxSpec
from evsys.sandbox.base import Capability, Sandbox, SandboxError
from evsys.sandbox.registry import create_sandbox
from evsys.sandbox.warm import IDLE_TIMEOUT_SEC, WarmKeeper, fit_warm_count, stop_all

log = logging.getLogger(__name__)


def reuse_key(spec: SandboxSpec) -> str | None:
    """Specs with equal keys may share a sandbox one after the other, whatever their network (a reset gives a
    sandbox a fresh network too); None: never reuse (a pod's member, whose network its sidecars share)."""
    if spec.pod is not None:
        return None
    return json.dumps(spec.model_dump(mode="json", exclude={"name"}), sort_keys=True)


class SandboxPool:
    """Idle sandboxes by spec; `acquire` / `release` around each trial, `close` at the end of a job."""

    def __init__(
        self,
        factory: Callable[[SandboxSpec], Sandbox],
        *,
        max_idle: int = 8,
        warm: int = 0,
        idle_timeout_sec: float = IDLE_TIMEOUT_SEC,
        demand: Callable[[], int] | None = None,
    ) -> None:
        self.factory = factory
        self.max_idle = max_idle
        # how many acquires are still to come (a job's trials not started yet); None: unknown. A released
        # sandbox no later trial can take is stopped rather than reset for nobody.
        self.demand = demand
        # warm.py: `warm` started sandboxes per spec kept ready beside the reset ones, as many as memory holds
        warm, shrunk = fit_warm_count(warm)
        if shrunk is not None:
            log.warning("warm pool: %s", shrunk)
        self.warm = WarmKeeper(warm, self.start_new, idle_timeout_sec=idle_timeout_sec) if warm > 0 else None
        self._idle: dict[str, list[Sandbox]] = {}
        self._keys: dict[int, str | None] = {}  # id(sandbox) -> its reuse key
        self._reused: set[int] = set()
        self._releasing: set[asyncio.Task] = set()
        self._resetting = 0  # releases being reset now: places among the idle already taken
        self._inflight: dict[str, int] = {}  # background releases (resets) in flight by reuse key
        self._awaiting: dict[str, int] = {}  # acquires waiting for one of them, by reuse key
        self._landed = asyncio.Event()  # set (and replaced) each time a reset ends
        self._closed = False
        self.started = 0
        self.reused = 0

    @classmethod
    def for_backend(
        cls,
        backend: str,
        *,
        max_idle: int,
        warm: int = 0,
        idle_timeout_sec: float = IDLE_TIMEOUT_SEC,
        demand: Callable[[], int] | None = None,
    ) -> SandboxPool:
        """A pool starting sandboxes with `create_sandbox(spec, backend)`; `max_idle=0` keeps none, `warm=N`
        keeps N started ones per spec ready (warm.py); `demand`: acquires still to come (see `__init__`)."""

        def make(spec: SandboxSpec) -> Sandbox:
            return create_sandbox(spec, backend=backend)

        return cls(make, max_idle=max_idle, warm=warm, idle_timeout_sec=idle_timeout_sec, demand=demand)

    @property
    def idle_count(self) -> int:
        """Sandboxes waiting for their next trial (reset ones and warm ones)."""
        warm = self.warm.ready_count if self.warm is not None else 0
        return sum(len(v) for v in self._idle.values()) + warm

    def prewarm(self, spec: SandboxSpec) -> None:
        """Start the warm sandboxes of `spec` now, ahead of its first trial (no-op without `warm`)."""
        if self.warm is not None:
            self.warm.want(spec)

    async def acquire(self, spec: SandboxSpec) -> Sandbox:
        """A running sandbox for `spec`: an idle one of an equal spec, renamed, or a newly started one
        (`was_reused(sandbox)` tells which)."""
        return await self.acquire_within(spec, None)

    def _take_idle(self, spec: SandboxSpec, key: str | None) -> Sandbox | None:
        if self._closed:
            raise SandboxError("the sandbox pool is closed")
        idle = self._idle.get(key or "")
        if key is None or not idle:
            return None
        sandbox = idle.pop()
        sandbox.spec = spec  # the same sandbox under this trial's name
        self.reused += 1
        self._reused.add(id(sandbox))
        self._keys[id(sandbox)] = key
        return sandbox

    async def _start(self, spec: SandboxSpec, key: str | None) -> Sandbox:
        sandbox = self.factory(spec)
        await sandbox.start()
        self.started += 1
        self._reused.discard(id(sandbox))
        self._keys[id(sandbox)] = key
        return sandbox

    async def acquire_within(self, spec: SandboxSpec, timeout: float | None) -> Sandbox:  # noqa: ASYNC109
        """`acquire`, bounded by `timeout` seconds (TimeoutError) and by the caller's cancellation, without
        ever losing a sandbox: a start that finishes as the wait gives up (asyncio.wait_for drops such a
        result on Python 3.11) or that is cancelled too late is stopped here rather than left running. An
        idle sandbox is handed over at once."""
        key = reuse_key(spec)
        sandbox = self._take_idle(spec, key)
        if self.warm is not None:  # a reset sandbox first; a warm one (fresh) next
            if sandbox is not None:
                self.warm.want(spec)
                return sandbox
            sandbox = self.warm.take(spec)
            if sandbox is not None:
                self._keys[id(sandbox)] = key
                return sandbox
        if sandbox is None:  # then one being reset (milliseconds), rather than a new start
            sandbox = await asyncio.wait_for(self._await_reset(spec, key), timeout)
        if sandbox is not None:
            return sandbox
        return await self._start_within(spec, key, timeout)

    async def _await_reset(self, spec: SandboxSpec, key: str | None) -> Sandbox | None:
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
            sandbox = self._take_idle(spec, key)
            if sandbox is not None:
                return sandbox
        return None

    def _stop_surplus(self) -> None:
        """Stop (in the background; `close` waits) idle sandboxes past `max_idle` that were kept for acquires
        which no longer wait (cancelled); a reset still in flight is checked when it lands."""
        idle = [(key, sandbox) for key, group in self._idle.items() for sandbox in group]
        surplus = len(idle) - self.max_idle - sum(self._awaiting.values())
        for key, sandbox in idle[: max(0, surplus)]:
            self._idle[key].remove(sandbox)
            stopping = asyncio.ensure_future(sandbox.stop())
            self._releasing.add(stopping)
            stopping.add_done_callback(self._released_later)

    async def start_new(self, spec: SandboxSpec) -> Sandbox:
        """A newly started sandbox of this pool (what warm sandboxes are), never lost to a cancellation."""
        sandbox = await self._start_within(spec, reuse_key(spec), None)
        self._keys.pop(id(sandbox), None)  # set again when a trial takes it
        return sandbox

    async def _start_within(self, spec: SandboxSpec, key: str | None, timeout: float | None) -> Sandbox:  # noqa: ASYNC109
        starting = asyncio.ensure_future(self._start(spec, key))
        try:
            return await asyncio.wait_for(asyncio.shield(starting), timeout)
        except BaseException:
            starting.cancel()
            try:
                sandbox = await starting
            except BaseException:  # the start was abandoned: nothing runs
                sandbox = None
            if sandbox is not None:
                await self.release(sandbox, reusable=False)
            raise

    def was_reused(self, sandbox: Sandbox) -> bool:
        """True when `sandbox` came out of `acquire` as a reset sandbox of an earlier trial."""
        return id(sandbox) in self._reused

    async def release(self, sandbox: Sandbox, *, reusable: bool = True, wait: bool = True) -> None:
        """Reset `sandbox` and keep it for the next trial of its spec, or stop it (see the module doc).

        Whether it is kept is decided now, while the caller still counts among the pool's users (`demand`).
        `wait=False`: a sandbox that is kept is handed back at once and reset in the background (the next
        acquire of its spec waits for it rather than starting another, `close` waits for it); one that is
        not kept is stopped before this returns."""
        key = self._place_for(sandbox, reusable)
        if key is not None and not wait:
            self._inflight[key] = self._inflight.get(key, 0) + 1  # counted now: the next acquire waits for it
            later = asyncio.ensure_future(self._reset_in_flight(sandbox, key))
            self._releasing.add(later)
            later.add_done_callback(self._released_later)
            return
        task = asyncio.current_task()
        if task is not None:
            self._releasing.add(task)
        try:
            if key is None or not await self._reset_into_idle(sandbox, key):
                await sandbox.stop()
        finally:
            self._releasing.discard(task)

    def _place_for(self, sandbox: Sandbox, reusable: bool) -> str | None:
        """The reuse key of the idle place `sandbox` is given (counted among the resets under way from now),
        or None when it is to be stopped: not reusable, no reset, the pool closed, or no room."""
        key = self._keys.pop(id(sandbox), None)
        self._reused.discard(id(sandbox))
        if not reusable or key is None or not sandbox.supports(Capability.RESET) or self._closed:
            return None
        idle = sum(len(group) for group in self._idle.values())  # warm ones not counted
        room = self.max_idle if self.demand is None else min(self.max_idle, self.demand())
        # resets in flight count (a burst keeps `room`, not all of itself), except those acquires already
        # wait for: those go to trials that have started, which `demand` no longer counts
        if idle + self._resetting - sum(self._awaiting.values()) >= room:
            return None
        self._resetting += 1
        return key

    async def _reset_into_idle(self, sandbox: Sandbox, key: str) -> bool:
        """Reset a sandbox `_place_for` gave a place and keep it idle; False when the reset failed or the pool
        closed meanwhile."""
        try:
            await sandbox.reset()
        except SandboxError as exc:
            log.debug("not reusing %s: %s", sandbox.spec.name, exc)
            return False
        finally:
            self._resetting -= 1
        idle = sum(len(group) for group in self._idle.values())
        if self._closed or idle >= self.max_idle + sum(self._awaiting.values()):  # its acquire left meanwhile
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

    def _released_later(self, task: asyncio.Future) -> None:
        self._releasing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("releasing a sandbox failed: %s", task.exception())

    async def close(self) -> None:
        """Wait for releases in flight, then stop every idle sandbox; later releases stop theirs."""
        self._closed = True
        if self.warm is not None:
            await self.warm.close()
        pending = self._releasing - {asyncio.current_task()}
        if pending:
            await asyncio.wait(pending)
        idle = [sb for group in self._idle.values() for sb in group]
        self._idle.clear()
        await stop_all(idle)
