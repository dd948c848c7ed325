"""The sandbox pool: every sandbox evsys hands out comes from one `SandboxPool` as a `Lease`
(docs/sandbox.md "Reuse between trials", "Warm sandboxes"; the slot API's `SlotPool` is built on it).

`lease = await pool.acquire(spec, timeout=...)` gives a running sandbox for `spec` (`lease.sandbox`;
`lease.reused` when it is a reset sandbox of an earlier holder), `await lease.release(reusable=...)` gives it
back once, `await pool.close()` stops everything the pool holds. How sandboxes are kept is the pool's
policies' (policies.py), each naming the specs it keeps (`Admits`; equal `SandboxSpec.pool_key()` = equal
in everything but the name):

- `ReusePolicy(max_idle, demand)` (reuse.py): a released sandbox is reset (every process killed, a fresh
  root, /tmp, /dev, IPC and network) and kept for the next holder of an equal spec, or stopped when it cannot
  be reset, went wrong, or enough are idle. Only backends declaring `Capability.RESET` (the local one) are
  kept; elsewhere every lease is a newly started sandbox.
- `WarmPolicy(count)` (warm.py): `count` started sandboxes per spec kept ready ahead of demand.
- `SharePolicy(slots_per_sandbox)` (shared.py): leases are places in sandboxes several holders share
  (`lease.place`), instead of whole sandboxes (own.py).
"""

from evsys.sandbox.pool.core import SandboxPool
from evsys.sandbox.pool.lease import Lease
from evsys.sandbox.pool.policies import IDLE_TIMEOUT_SEC, Admits, ReusePolicy, SharePolicy, WarmPolicy
from evsys.sandbox.pool.starter import stop_all
from evsys.sandbox.pool.warm import WARM_SANDBOX_MB, WarmPoolError, fit_warm_count

__all__ = [
    "IDLE_TIMEOUT_SEC",
    "WARM_SANDBOX_MB",
    "Admits",
    "Lease",
    "ReusePolicy",
    "SandboxPool",
    "SharePolicy",
    "WarmPolicy",
    "WarmPoolError",
    "fit_warm_count",
    "stop_all",
]
