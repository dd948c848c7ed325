"""Which of a local sandbox's limits hold on this machine, and by what.

With every controller (cgroup v1 or v2) each limit is a cgroup limit over every process of the sandbox. Where
the orchestrator's cgroup is not given a controller (a container, a pod, a VM runtime; see delegation.py):
- pids_max falls back to RLIMIT_NPROC, set on the sandbox's processes: the kernel counts the processes of the
  sandbox's own agent uid (uids.py) against it, so the agent cannot fork-bomb the host; root's processes in
  the sandbox (task setup, the verifier) are not counted, and a hit is not reported in `limits_hit`;
- memory_mb and cpus are not enforced at all; evsys says so (`evsys doctor`, and a warning when the first
  sandbox starts) rather than refusing to run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from evsys.sandbox.local.cgroups import CgroupLayout

log = logging.getLogger(__name__)
_warned: set[str] = set()


@dataclass(frozen=True)
class LimitHold:
    """How one of a sandbox's limits is enforced here."""

    limit: str  # the SandboxSpec field: memory_mb, pids_max, cpus
    by: str  # what enforces it, or "" when nothing does
    note: str = ""  # why the cgroup controller is not used, and what that means

    @property
    def enforced(self) -> bool:
        """True when something enforces the limit (a cgroup, or the pids fallback)."""
        return bool(self.by)

    @property
    def by_cgroup(self) -> bool:
        """True when a cgroup enforces it over every process of the sandbox."""
        return self.by.startswith("cgroup")


NPROC_FALLBACK = "RLIMIT_NPROC of the sandbox's agent uid"


def limit_holds(layout: CgroupLayout) -> list[LimitHold]:
    """memory_mb, pids_max and cpus: by which cgroup, by the pids fallback, or not at all (and why)."""
    holds = []
    for limit, ctrl in (("memory_mb", "memory"), ("pids_max", "pids"), ("cpus", "cpu")):
        if ctrl in layout.parents:
            holds.append(LimitHold(limit, f"cgroup v{layout.version} {ctrl}"))
            continue
        reason = layout.missing.get(ctrl, f"no {ctrl} controller")
        if ctrl == "pids":
            note = f"{reason}; only the agent's processes are counted, and hits are not reported"
            holds.append(LimitHold(limit, NPROC_FALLBACK, note))
        else:
            holds.append(LimitHold(limit, "", f"NOT LIMITED: {reason}"))
    return holds


def reports_limit_hits(layout: CgroupLayout) -> bool:
    """Whether `ExecResult.limits_hit` can report memory and pids hits here (both cgroups present)."""
    return {"memory", "pids"} <= set(layout.parents)


def warn_unenforced(layout: CgroupLayout) -> None:
    """Log, once per process and limit, each limit a sandbox asks for that is not enforced here."""
    for hold in limit_holds(layout):
        if not hold.by_cgroup and hold.limit not in _warned:
            _warned.add(hold.limit)
            how = f"by {hold.by}: {hold.note}" if hold.by else hold.note
            log.warning("local sandbox %s: %s", hold.limit, how)
