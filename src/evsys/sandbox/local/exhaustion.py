"""Which of a local sandbox's own limits were hit since a mark (its start or last reset), from the kernel's
counters: the evidence `LocalSandbox.exhausted_limits` reports (docs/sandbox.md, "Limits the agent hits").

- memory: OOM kills in the sandbox's memory cgroup while that cgroup was at its limit (v2 `memory.events`
  oom_kill with `oom` grown; v1 `memory.oom_control` oom_kill with the usage watermark
  `memory.max_usage_in_bytes` at the limit). An OOM kill without the limit reached is the host running out of
  memory: not the sandbox's doing, so not reported;
- pids: forks refused by the sandbox's pids limit (`pids.events` max);
- tmpfs: the sandbox's /tmp or /dev/shm with less than a MiB left (statvfs through its daemon's root).
"""

from __future__ import annotations

import contextlib
import os

from evsys.sandbox.local.cgroups import SandboxCgroup
from evsys.sandbox.local.cgsetup import AGENT

FULL_BYTES = 1 << 20  # a tmpfs with less left than this is full
TMPFS_PLACES = ("/tmp", "/dev/shm")


def counter_evidence(before: dict[str, int], after: dict[str, int], where: dict[str, str]) -> list[str]:
    """What the cgroup counters say the sandbox hit between two readings (`where`: controller -> its
    cgroup directory, named in the evidence)."""

    def grown(kind: str) -> tuple[int, int, int]:
        old, new = before.get(kind, 0), after.get(kind, before.get(kind, 0))
        return old, new, new - old

    evidence = []
    kills_before, kills_after, kills = grown("memory")
    hits_before, hits_after, hits = grown("memory_limit")
    if kills > 0 and hits > 0:
        evidence.append(
            f"memory: {kills} OOM kill(s) at the sandbox's memory limit (oom_kill {kills_before} -> "
            f"{kills_after}, limit reached {hits_before} -> {hits_after} times; {where.get('memory')})"
        )
    refused_before, refused_after, refused = grown("pids")
    if refused > 0:
        evidence.append(
            f"pids: {refused} fork(s) refused at the sandbox's pids limit (pids.events max "
            f"{refused_before} -> {refused_after}; {where.get('pids')})"
        )
    return evidence


def full_tmpfs(daemon_pid: int | None) -> list[str]:
    """The sandbox's tmpfs places (seen through its daemon's root) with less than FULL_BYTES left; none when
    the daemon is gone (its mounts went with it)."""
    if daemon_pid is None:
        return []
    evidence = []
    for place in TMPFS_PLACES:
        with contextlib.suppress(OSError):
            st = os.statvfs(f"/proc/{daemon_pid}/root{place}")
            left = st.f_bavail * st.f_frsize
            if st.f_blocks and left < FULL_BYTES:
                size = st.f_blocks * st.f_frsize
                evidence.append(f"tmpfs: {place} is full ({left} of {size} bytes left)")
    return evidence


def _scope(counters: dict[str, int], prefix: str) -> dict[str, int]:
    return {key.removeprefix(prefix): value for key, value in counters.items() if key.startswith(prefix)}


def exhaustion_evidence(
    cg: SandboxCgroup | None, baseline: dict[str, int], daemon_pid: int | None
) -> list[str]:
    """Every limit the sandbox hit since `baseline` (a `read_counters()` reading), with the counters. With
    the nested layout (cgsetup.py) the agent's cgroup counts, and the sandbox's own cgroup's memory limit
    only while the agent's cgroup had reached its own: a verification run that outgrows its own limits is
    the task's, not the agent's."""
    evidence = full_tmpfs(daemon_pid)
    if cg is None:
        return evidence
    now = cg.read_counters()
    if not cg.nested:
        where = {ctrl: str(path) for ctrl, path in cg.dirs.items()}
        return counter_evidence(baseline, now, where) + evidence
    agent = {ctrl: str(cg.dirs[ctrl] / AGENT) for ctrl in cg.nested}
    own = counter_evidence(_scope(baseline, f"{AGENT}."), _scope(now, f"{AGENT}."), agent)
    reached = now.get(f"{AGENT}.memory_limit", 0) > baseline.get(f"{AGENT}.memory_limit", 0)
    if reached and not any(e.startswith("memory") for e in own):  # (v2 counts the agent's in the outer too)
        outer = {"memory": str(cg.dirs.get("memory"))}
        own += [e for e in counter_evidence(_flat(baseline), _flat(now), outer) if e.startswith("memory")]
    return own + evidence


def _flat(counters: dict[str, int]) -> dict[str, int]:
    return {key: value for key, value in counters.items() if "." not in key}
