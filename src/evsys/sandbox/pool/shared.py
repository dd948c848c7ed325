"""`SharedSandboxes`: the share policy at work — leases that are places in sandboxes several holders share
(SharePolicy: `slots_per_sandbox` places each; the slot API's `SlotPool(slots_per_sandbox=N)`).

Places are handed out from running sandboxes of an equal spec (`pool_key`), lowest place first, so a released
place is the next one taken. When every place is taken a new sandbox is started, up to `max_sandboxes` in all
(counting the ones being started); past that, `lease` waits for a release. A sandbox whose places are all free
is stopped after `idle_timeout_sec` while more than `min_sandboxes` run, or at once when a holder of another
spec needs the room. `fill` starts `min_sandboxes` ahead of demand. A sandbox given back as not reusable is
`broken`: no new place is taken in it, and it is stopped once its last place is back.
"""

from __future__ import annotations

import asyncio
import bisect
from dataclasses import dataclass, field
from functools import partial

from evsys.records import SandboxSpec
from evsys.sandbox.base import Sandbox, SandboxError
from evsys.sandbox.pool.lease import Lease
from evsys.sandbox.pool.policies import SharePolicy
from evsys.sandbox.pool.starter import Starter


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
        """True when no place of it is taken."""
        return len(self.free) == self.size


class SharedSandboxes:
    """Shared sandboxes of one pool (see the module docstring)."""

    def __init__(self, starter: Starter, policy: SharePolicy, max_sandboxes: int | None) -> None:
        self.starter = starter
        self.policy = policy
        self.size = policy.slots_per_sandbox
        self.max_sandboxes = max_sandboxes
        self.boxes: list[SharedBox] = []
        self._starting: dict[str, int] = {}  # by spec key: sandboxes being started
        self._demand: dict[str, int] = {}  # by spec key: `lease`s not served yet
        # `lease`s waiting for a place or room, woken in the order they came (a set's order would vary by run)
        self._waiters: list[asyncio.Future[None]] = []
        self._closed = False

    @property
    def running(self) -> int:
        """Sandboxes running or being started."""
        return len(self.boxes) + sum(self._starting.values())

    @property
    def waiting(self) -> int:
        """`lease`s waiting for a place or for room."""
        return len(self._waiters)

    @property
    def idle_count(self) -> int:
        """Nothing is kept idle for a spec here (idle shared sandboxes are counted as running)."""
        return 0

    @property
    def shared(self) -> list[Sandbox]:
        """The shared sandboxes running."""
        return [box.sandbox for box in self.boxes]

    def _room(self) -> bool:
        return self.max_sandboxes is None or self.running < self.max_sandboxes

    def _key(self, spec: SandboxSpec) -> str:
        return self.policy.admits.key(spec) or spec.pool_key()

    async def lease(self, spec: SandboxSpec) -> Lease:
        """A free place in a sandbox of `spec` (started when none has one and there is room; else waiting for
        a release). Sandboxes start side by side when more `lease`s wait than the ones starting will hold."""
        key = self._key(spec)
        self._demand[key] = self._demand.get(key, 0) + 1
        try:
            while True:
                if self._closed:
                    raise SandboxError("the slot pool is closed")
                box = next((b for b in self.boxes if b.key == key and b.free and not b.broken), None)
                if box is not None:
                    return self._take_place(box)
                if not self._room():
                    self._make_room()
                if self._room() and self._starting.get(key, 0) * self.size < self._demand[key]:
                    break
                await self._wait()
            box = await self._start(spec, key)
            return self._take_place(box)  # no await since the start: the place cannot be lost
        finally:
            self._demand[key] -= 1

    def _take_place(self, box: SharedBox) -> Lease:
        if box.idle_stop is not None:
            box.idle_stop.cancel()
            box.idle_stop = None
        index = box.free.pop(0)
        clean = index in box.clean
        box.clean.discard(index)
        return Lease(box.sandbox, partial(self._give_back, box, index), place=index, clean=clean)

    async def _start(self, spec: SandboxSpec, key: str) -> SharedBox:
        self._starting[key] = self._starting.get(key, 0) + 1
        try:
            sandbox = await self.starter.start(spec)
        finally:
            self._starting[key] -= 1
            self._notify()
        if self._closed:  # closed while it started
            await asyncio.shield(self.starter.stop_later(sandbox))
            raise SandboxError("the slot pool is closed")
        box = SharedBox(sandbox, key, self.size, list(range(self.size)))
        self.boxes.append(box)  # before any other await: a cancelled caller never loses it
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
        self.starter.stop_later(box.sandbox)

    async def _give_back(self, box: SharedBox, index: int, reusable: bool, wait: bool, cleaned: bool) -> None:
        """Put place `index` of `box` back: `cleaned` when it was cleaned fully on the way (the next holder
        needs not clean it again); not `reusable` when the sandbox must not be used again."""
        bisect.insort(box.free, index)
        if cleaned and reusable:
            box.clean.add(index)
        box.broken = box.broken or not reusable
        if box in self.boxes and box.idle:
            if box.broken:
                self._drop(box)
            elif len(self.boxes) > self.policy.min_sandboxes:
                box.idle_stop = asyncio.ensure_future(self._stop_when_idle(box))
        self._notify()

    async def _stop_when_idle(self, box: SharedBox) -> None:
        await asyncio.sleep(self.policy.idle_timeout_sec)
        if box in self.boxes and box.idle and len(self.boxes) > self.policy.min_sandboxes:
            self._drop(box)
            self._notify()

    def prewarm(self, spec: SandboxSpec) -> None:
        """Nothing: shared sandboxes are started ahead by `fill`."""

    async def fill(self, spec: SandboxSpec) -> None:
        """Start sandboxes of `spec` until `min_sandboxes` run."""
        key = self._key(spec)
        while self.running < self.policy.min_sandboxes and not self._closed:
            await self._start(spec, key)

    async def _wait(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def _notify(self) -> None:
        """Wake every waiting `lease` (each looks again)."""
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def close(self) -> None:
        """Stop every shared sandbox (places still taken included); waiting `lease`s fail."""
        self._closed = True
        for box in list(self.boxes):
            self._drop(box)
        self._notify()
