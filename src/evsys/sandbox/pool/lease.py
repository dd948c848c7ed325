"""`Lease`: what `SandboxPool.acquire` hands its holder, given back once with `release`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from evsys.sandbox.base import Sandbox

# (reusable, wait, cleaned) -> the pool takes the sandbox (or the place) back
GiveBack = Callable[[bool, bool, bool], Awaitable[None]]


@dataclass(eq=False)
class Lease:
    """A sandbox (or a place in a shared one) held from `SandboxPool.acquire` until `release`."""

    sandbox: Sandbox
    give_back: GiveBack = field(repr=False)
    reused: bool = False  # a sandbox reset after an earlier holder (TrialResult.sandbox_reused)
    place: int | None = None  # its place in a shared sandbox (SharePolicy); None: the whole sandbox
    clean: bool = False  # a shared place cleaned when last released, nothing of its uid run since
    acquire_sec: float = 0.0  # how long `acquire` took (a start, a wait for a reset or for room)
    released: bool = False

    @property
    def shared(self) -> bool:
        """True when the lease is one place in a sandbox other holders share."""
        return self.place is not None

    async def release(self, *, reusable: bool = True, wait: bool = True, cleaned: bool = False) -> None:
        """Give it back (once; later calls do nothing). `reusable=False`: it went wrong, stop it (a shared
        sandbox once its other places are back) rather than keep it. `wait=False`: a sandbox to be reset is
        reset in the background. `cleaned`: a shared place was cleaned on the way (taking it skips that)."""
        if self.released:
            return
        self.released = True
        await self.give_back(reusable, wait, cleaned)
