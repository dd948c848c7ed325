"""How a `SandboxPool` keeps sandboxes: its policies, as parameters (the behaviour is in reuse.py, warm.py
and shared.py). Every policy names the specs it keeps sandboxes for (`Admits`); sandboxes of specs with equal
`SandboxSpec.pool_key()` (everything but the name) serve each other's holders."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from evsys.records import SandboxSpec

IDLE_TIMEOUT_SEC = 300.0


@dataclass(frozen=True)
class Admits:
    """Which specs a policy keeps sandboxes for: `pods` (a pod's member, whose network its sidecars share)
    and `allowlist` (whose hosts are resolved when the sandbox starts) are the two differing rules."""

    pods: bool
    allowlist: bool

    def key(self, spec: SandboxSpec) -> str | None:
        """`spec.pool_key()`, or None when the policy never keeps a sandbox of this spec."""
        if (spec.pod is not None and not self.pods) or (spec.network == "allowlist" and not self.allowlist):
            return None
        return spec.pool_key()


@dataclass(frozen=True)
class ReusePolicy:
    """Reset released sandboxes and keep up to `max_idle` of them for the next holders (0: keep none); never
    more than `demand()` when given (the acquires still to come: a job's trials not started yet). Every
    network mode is reset (a fresh network too); a pod's member never (its sidecars share its network)."""

    max_idle: int = 8
    demand: Callable[[], int] | None = None
    admits: Admits = field(default=Admits(pods=False, allowlist=True))


@dataclass(frozen=True)
class WarmPolicy:
    """Keep `count` started sandboxes per spec ready ahead of demand (bounded by memory, warm.py), stopped
    when no holder asked for their spec in `idle_timeout_sec`. A pod's and an allowlist's never."""

    count: int = 0
    idle_timeout_sec: float = IDLE_TIMEOUT_SEC
    admits: Admits = field(default=Admits(pods=False, allowlist=False))


@dataclass(frozen=True)
class SharePolicy:
    """Leases are places in shared sandboxes, `slots_per_sandbox` per sandbox; `min_sandboxes` kept started,
    idle ones above it stopped after `idle_timeout_sec` (shared.py)."""

    slots_per_sandbox: int = 2
    min_sandboxes: int = 0
    idle_timeout_sec: float = IDLE_TIMEOUT_SEC
    admits: Admits = field(default=Admits(pods=True, allowlist=True))

    def __post_init__(self) -> None:
        if self.slots_per_sandbox < 2:
            raise ValueError(f"a shared sandbox has 2 places or more, got {self.slots_per_sandbox}")
