"""The sandboxes whose slots several trajectories share (`SlotPool(slots_per_sandbox=N)`, N > 1).

Slots are handed out from running sandboxes of an equal spec (everything but the name), lowest place first, so
a released slot is the next one taken. When every place is taken a new sandbox is started, up to
`max_sandboxes` in all (counting the ones being started); past that, `take` waits for a release. A sandbox
whose places are all free is stopped after `idle_timeout_sec` while more than `min_sandboxes` run, or at once
when a trajectory of another spec needs the room. `fill` starts `min_sandboxes` ahead of demand. A sandbox a
cleanup failed in is `broken`: no new slot is taken in it, and it is stopped once its last slot is back.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import logging
from dataclasses import dataclass, field

from evsys.records import SandboxSpec
from evsys.sandbox.base import Sandbox, SandboxError
from evsys.sandbox.pool import SandboxPool

log = logging.getLogger(__name__)


def share_key(spec: SandboxSpec) -> str:
    """Slots of specs equal in everything but the name may share a sandbox."""
    return json.dumps(spec.model_dump(mode="json", exclude={"name"}), sort_keys=True)


@dataclass(eq=False)
class SharedBox:
    """One shared sandbox: its free places, and whether it may be used again."""

    sandbox: Sandbox
    key: str
    size: int
    free: list[int] = field(default_factory=list)
    clean: set[int] = field(default_factory=set)  # free places cleaned when released (nothing since)
    broken: bool = False
    idle_stop: asyncio.Task[None] | None = None

    @property
    def idle(self) -> bool:
        """True when no slot of it is taken."""
        return len(self.free) == self.size


class SharedSandboxes:
    """Shared sandboxes over a `SandboxPool` (see the module docstring)."""

    def __init__(
        self,
        pool: SandboxPool,
        *,
        slots_per_sandbox: int,
        min_sandboxes: int = 0,
        max_sandboxes: int | None = None,
        idle_timeout_sec: float,
    ) -> None:
        self.pool = pool
        self.size = slots_per_sandbox
        self.min_sandboxes = min_sandboxes
        self.max_sandboxes = max_sandboxes
        self.idle_timeout_sec = idle_timeout_sec
        self.boxes: list[SharedBox] = []
        self.started = 0  # sandboxes started so far
        self._starting: dict[str, int] = {}  # by spec key: sandboxes being started
        self._demand: dict[str, int] = {}  # by spec key: `take`s not served yet
        self._waiters: set[asyncio.Future[None]] = set()  # `take`s waiting for a place or room
        self._stopping: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def running(self) -> int:
        """Sandboxes running or being started."""
        return len(self.boxes) + sum(self._starting.values())

    @property
    def waiting(self) -> int:
        """`take`s waiting for a place or for room."""
        return len(self._waiters)

    def _room(self) -> bool:
        return self.max_sandboxes is None or self.running < self.max_sandboxes

    async def take(self, spec: SandboxSpec) -> tuple[SharedBox, int]:
        """A free place in a sandbox of `spec` (started when none has one and there is room; else waiting for
        a release); the box and the place's index. Sandboxes start side by side when more `take`s wait than
        the ones already starting will hold."""
        key = share_key(spec)
        self._demand[key] = self._demand.get(key, 0) + 1
        try:
            while True:
                if self._closed:
                    raise SandboxError("the slot pool is closed")
                box = next((b for b in self.boxes if b.key == key and b.free and not b.broken), None)
                if box is not None:
                    return box, self._take_place(box)
                if not self._room():
                    self._make_room()
                if self._room() and self._starting.get(key, 0) * self.size < self._demand[key]:
                    break
                await self._wait()
            self._starting[key] = self._starting.get(key, 0) + 1
            try:
                box = await self._start(spec, key)
            finally:
                self._starting[key] -= 1
                self._notify()
            return box, self._take_place(box)  # no await since the start: the place cannot be lost
        finally:
            self._demand[key] -= 1

    def _take_place(self, box: SharedBox) -> int:
        if box.idle_stop is not None:
            box.idle_stop.cancel()
            box.idle_stop = None
        return box.free.pop(0)

    async def _start(self, spec: SandboxSpec, key: str) -> SharedBox:
        sandbox = await self.pool.acquire_within(spec, None)
        if self._closed:  # closed while it started
            await self.pool.release(sandbox, reusable=False)
            raise SandboxError("the slot pool is closed")
        box = SharedBox(sandbox, key, self.size, list(range(self.size)))
        self.boxes.append(box)  # before any other await: a cancelled caller never loses it
        self.started += 1
        return box

    def _make_room(self) -> None:
        """Stop an idle sandbox (of any spec) so that a sandbox of another spec can start."""
        box = next((b for b in self.boxes if b.idle), None)
        if box is not None:
            self._drop(box)

    def _drop(self, box: SharedBox) -> None:
        """Forget `box` and stop its sandbox in the background."""
        if box.idle_stop is not None and box.idle_stop is not asyncio.current_task():
            box.idle_stop.cancel()
        self.boxes.remove(box)
        task = asyncio.ensure_future(self.pool.release(box.sandbox, reusable=False))
        self._stopping.add(task)
        task.add_done_callback(self._stopped)

    def _stopped(self, task: asyncio.Task[None]) -> None:
        self._stopping.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("stopping a shared sandbox failed: %s", task.exception())

    def give_back(self, box: SharedBox, index: int, *, cleaned: bool = False, broken: bool = False) -> None:
        """Put place `index` of `box` back: `cleaned` when it was cleaned fully on the way (the next `take`
        needs not clean it again), `broken` when the sandbox must not be used again."""
        bisect.insort(box.free, index)
        if cleaned:
            box.clean.add(index)
        box.broken = box.broken or broken
        if box in self.boxes and box.idle:
            if box.broken:
                self._drop(box)
            elif len(self.boxes) > self.min_sandboxes:
                box.idle_stop = asyncio.ensure_future(self._stop_when_idle(box))
        self._notify()

    async def _stop_when_idle(self, box: SharedBox) -> None:
        await asyncio.sleep(self.idle_timeout_sec)
        if box in self.boxes and box.idle and len(self.boxes) > self.min_sandboxes:
            self._drop(box)
            self._notify()

    async def fill(self, spec: SandboxSpec) -> None:
        """Start sandboxes of `spec` until `min_sandboxes` run."""
        key = share_key(spec)
        while self.running < self.min_sandboxes and not self._closed:
            self._starting[key] = self._starting.get(key, 0) + 1
            try:
                await self._start(spec, key)
            finally:
                self._starting[key] -= 1
                self._notify()

    async def _wait(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.add(waiter)
        try:
            await waiter
        finally:
            self._waiters.discard(waiter)

    def _notify(self) -> None:
        """Wake every waiting `take` (each looks again)."""
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def close(self) -> None:
        """Stop every shared sandbox (slots still taken included); waiting `take`s fail."""
        self._closed = True
        for box in list(self.boxes):
            self._drop(box)
        self._notify()
        if self._stopping:
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._stopping, return_exceptions=True)
