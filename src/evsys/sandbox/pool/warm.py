"""`WarmKeeper`: the warm policy at work — N started sandboxes per spec kept ready ahead of demand
(WarmPolicy; docs/sandbox.md).

A `SandboxPool` made with `warm=N` keeps, for every spec it has been asked for (`acquire`) or told about
(`prewarm`), N freshly started sandboxes of an equal spec (everything but the name) beside the reset ones
trials released, so the next trial of that spec gets a running sandbox at once. They are refilled in the
background after each one is taken, and stopped when no trial asked for their spec for `idle_timeout_sec`
and when the pool closes (the job ends or is cancelled). A warm sandbox was never used: it is handed over as
started. Specs of a pod (sidecars) or with an allowlist are never kept warm.

Bounded by memory: `fit_warm_count` shrinks N (or refuses) up front when N idle sandboxes per spec would take
more than MEMORY_SHARE of the memory available, and refills stop (with one warning) while the memory
available has fallen below what the rest of the machine was left when the pool was made.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from evsys.records import SandboxSpec
from evsys.sandbox.base import Sandbox, SandboxError
from evsys.sandbox.pool.policies import WarmPolicy
from evsys.sandbox.pool.starter import stop_all

log = logging.getLogger(__name__)

WARM_SANDBOX_MB = 4  # what one idle warm sandbox is counted as (measured: ~0.4-1.2 MB; docs/scale.md)
MEMORY_SHARE = 0.5  # of the memory available when the pool is made, at most this much for warm sandboxes
MEMINFO = Path("/proc/meminfo")


class WarmPoolError(ValueError):
    """The machine cannot hold even one warm sandbox."""


def available_mb() -> int:
    """MemAvailable from /proc/meminfo, in MiB."""
    for line in MEMINFO.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    raise OSError(f"no MemAvailable in {MEMINFO}")


def fit_warm_count(requested: int, available: int | None = None) -> tuple[int, str | None]:
    """How many warm sandboxes per spec this machine can hold: `requested`, or fewer with a message saying
    why; WarmPoolError when not even one fits."""
    if requested <= 0:
        return 0, None
    available = available_mb() if available is None else available
    fits = int(available * MEMORY_SHARE) // WARM_SANDBOX_MB
    if fits >= requested:
        return requested, None
    need = requested * WARM_SANDBOX_MB
    why = f"{requested} warm sandboxes need ~{need} MiB; {available} MiB are available and warm sandboxes "
    why += f"may take {MEMORY_SHARE:.0%} of it"
    if fits < 1:
        raise WarmPoolError(f"cannot keep warm sandboxes: {why}")
    return fits, f"{why}: keeping {fits} per environment instead"


class WarmKeeper:
    """The warm sandboxes of one pool: `ready` by key, refilled by `demand`, reaped when idle."""

    def __init__(self, policy: WarmPolicy, start: Callable[[SandboxSpec], Awaitable[Sandbox]]) -> None:
        count, shrunk = fit_warm_count(policy.count)
        if shrunk is not None:
            log.warning("warm pool: %s", shrunk)
        self.count = count
        self.policy = policy
        self.idle_timeout_sec = policy.idle_timeout_sec
        self._start = start  # starts a sandbox of the pool, never losing one (Starter.start)
        self.ready: dict[str, list[Sandbox]] = {}
        self._templates: dict[str, SandboxSpec] = {}
        self._last_demand: dict[str, float] = {}
        self._fills: dict[str, asyncio.Task[None]] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._closed = False
        self._names = itertools.count(1)
        self._floor_mb = available_mb() * (1 - MEMORY_SHARE) if count else 0.0
        self._short_of_memory = False
        self.started = 0

    @property
    def ready_count(self) -> int:
        """Warm sandboxes waiting, over every spec."""
        return sum(len(group) for group in self.ready.values())

    def want(self, spec: SandboxSpec) -> str | None:
        """Keep `spec` warm from now (its idle timeout counts from now); its key, None if never kept warm."""
        key = self.policy.admits.key(spec)
        if key is None or self._closed or self.count == 0:
            return None
        self._templates[key] = spec
        self._last_demand[key] = time.monotonic()
        self._refill(key)
        return key

    def take(self, spec: SandboxSpec) -> Sandbox | None:
        """A warm sandbox for `spec` (renamed to it), or None; either way its spec is kept warm from now."""
        key = self.want(spec)
        group = self.ready.get(key) if key is not None else None
        if not group:
            return None
        sandbox = group.pop()
        sandbox.spec = spec  # the refill `want` scheduled runs after this: it sees one fewer ready
        return sandbox

    def _refill(self, key: str) -> None:
        fill = self._fills.get(key)
        if fill is None or fill.done():
            self._fills[key] = asyncio.ensure_future(self._fill(key))
        if self._reaper is None:
            self._reaper = asyncio.ensure_future(self._reap())

    async def _fill(self, key: str) -> None:
        while not self._closed and len(self.ready.get(key, ())) < self.count and key in self._templates:
            if not self._memory_allows():
                return
            template = self._templates[key]
            spec = template.model_copy(update={"name": f"{template.name[:80]}-warm{next(self._names)}"})
            try:
                sandbox = await self._start(spec)
            except (SandboxError, OSError) as exc:
                log.warning("warm sandbox for %s could not start: %s", template.name, exc)
                return
            self.started += 1
            if self._closed or key not in self._templates:
                await sandbox.stop()
                return
            self.ready.setdefault(key, []).append(sandbox)

    def _memory_allows(self) -> bool:
        short = available_mb() - WARM_SANDBOX_MB < self._floor_mb
        if short and not self._short_of_memory:
            log.warning(
                "warm pool: no more warm sandboxes while less than %d MiB of memory is available",
                int(self._floor_mb) + WARM_SANDBOX_MB,
            )
        self._short_of_memory = short
        return not short

    async def _reap(self) -> None:
        """Stop the warm sandboxes of every spec nobody asked for in idle_timeout_sec."""
        interval = min(max(self.idle_timeout_sec / 4, 0.05), 30.0)
        while not self._closed:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for key in [k for k, t in self._last_demand.items() if now - t >= self.idle_timeout_sec]:
                del self._last_demand[key]
                self._templates.pop(key, None)
                await stop_all(self.ready.pop(key, []))

    async def close(self) -> None:
        """Stop refilling and reaping, then stop every warm sandbox (also those starting right now)."""
        self._closed = True
        tasks = [t for t in (*self._fills.values(), self._reaper) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        ready = [sb for group in self.ready.values() for sb in group]
        self.ready.clear()
        await stop_all(ready)
