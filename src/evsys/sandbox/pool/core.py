"""`SandboxPool`: the one pool every sandbox is acquired from — `acquire(spec) -> Lease`, `lease.release()`,
`close()` (see the package docstring)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from evsys.records import SandboxSpec
from evsys.sandbox.base import Sandbox, SandboxError
from evsys.sandbox.pool.lease import Lease
from evsys.sandbox.pool.own import OwnSandboxes
from evsys.sandbox.pool.policies import IDLE_TIMEOUT_SEC, ReusePolicy, SharePolicy, WarmPolicy
from evsys.sandbox.pool.shared import SharedSandboxes
from evsys.sandbox.pool.starter import Starter
from evsys.sandbox.registry import create_sandbox


class Placement(Protocol):
    """What a lease is: a whole sandbox (OwnSandboxes) or a place in a shared one (SharedSandboxes)."""

    @property
    def idle_count(self) -> int: ...
    @property
    def waiting(self) -> int: ...
    @property
    def shared(self) -> list[Sandbox]: ...
    async def lease(self, spec: SandboxSpec) -> Lease: ...
    def prewarm(self, spec: SandboxSpec) -> None: ...
    async def fill(self, spec: SandboxSpec) -> None: ...
    async def close(self) -> None: ...


class SandboxPool:
    """Sandboxes handed out as `Lease`s and kept between holders by the pool's policies: `reuse` (reset and
    kept), `warm` (started ahead), `share` (places in shared sandboxes, instead of whole ones); at most
    `max_sandboxes` leased (shared: running) at once, an `acquire` past that waits for a release."""

    def __init__(
        self,
        factory: Callable[[SandboxSpec], Sandbox],
        *,
        reuse: ReusePolicy | None = None,
        warm: WarmPolicy | None = None,
        share: SharePolicy | None = None,
        max_sandboxes: int | None = None,
        backend: str | None = None,
    ) -> None:
        if max_sandboxes is not None and max_sandboxes < 1:
            raise ValueError(f"max_sandboxes must be >= 1, got {max_sandboxes}")
        self.starter = Starter(factory)
        self.backend = backend  # the backend `factory` starts (None: unknown)
        self.shares = share is not None  # leases are places in shared sandboxes
        self._closed = False
        self.reused = 0  # leases that were reset sandboxes of earlier holders
        self.placement: Placement = (
            SharedSandboxes(self.starter, share, max_sandboxes)
            if share is not None
            else OwnSandboxes(self.starter, reuse or ReusePolicy(), warm or WarmPolicy(), max_sandboxes)
        )

    @classmethod
    def for_backend(
        cls,
        backend: str,
        *,
        max_idle: int = 8,
        warm: int = 0,
        idle_timeout_sec: float = IDLE_TIMEOUT_SEC,
        demand: Callable[[], int] | None = None,
    ) -> SandboxPool:
        """Whole sandboxes started with `create_sandbox(spec, backend)`, up to `max_idle` reset ones kept
        (0: none; never more than `demand()`, the acquires still to come, when given) and `warm` started ones
        per spec ready ahead of demand (stopped after `idle_timeout_sec` unasked)."""

        def make(spec: SandboxSpec) -> Sandbox:
            return create_sandbox(spec, backend=backend)

        reuse = ReusePolicy(max_idle=max_idle, demand=demand)
        warm_policy = WarmPolicy(count=warm, idle_timeout_sec=idle_timeout_sec)
        return cls(make, reuse=reuse, warm=warm_policy, backend=backend)

    @property
    def idle_count(self) -> int:
        """Sandboxes waiting for their next holder (reset ones and warm ones)."""
        return self.placement.idle_count

    @property
    def waiting(self) -> int:
        """`acquire`s waiting for a release (at `max_sandboxes`)."""
        return self.placement.waiting

    @property
    def started(self) -> int:
        """Sandboxes started so far (warm ones included)."""
        return self.starter.started

    @property
    def shared_sandboxes(self) -> list[Sandbox]:
        """The shared sandboxes running (a `share` pool; empty otherwise)."""
        return self.placement.shared

    async def acquire(self, spec: SandboxSpec, *, timeout: float | None = None) -> Lease:  # noqa: ASYNC109
        """A lease on a running sandbox for `spec` (a kept one renamed to it, or a new one; `lease.reused`
        says which), bounded by `timeout` seconds (TimeoutError) and by the caller's cancellation without
        ever leaving a sandbox running or a place taken."""
        if self._closed:
            raise SandboxError("the sandbox pool is closed")
        began = time.monotonic()
        async with asyncio.timeout(timeout):
            lease = await self.placement.lease(spec)
        lease.acquire_sec = time.monotonic() - began
        self.reused += lease.reused
        return lease

    def prewarm(self, spec: SandboxSpec) -> None:
        """Start the warm sandboxes of `spec` now, ahead of its first acquire (no-op without `warm`)."""
        self.placement.prewarm(spec)

    async def fill(self, spec: SandboxSpec) -> None:
        """Start what the pool keeps ahead of demand for `spec` (warm ones; shared: `min_sandboxes`)."""
        await self.placement.fill(spec)

    async def close(self) -> None:
        """Stop every sandbox the pool holds; releases in flight end first, later ones stop theirs."""
        self._closed = True
        await self.placement.close()
        await self.starter.settle()

    async def __aenter__(self) -> SandboxPool:
        """The pool itself; `close` at the end of the block."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Stop everything (`close`)."""
        await self.close()
