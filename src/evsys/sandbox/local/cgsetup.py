"""What `evsysd --setup` writes into a sandbox's cgroups (native/setup.c): the limits, the cgroups it joins,
and the cgroup files it hands the daemon.

Headroom the agent cannot take: for the memory and pids controllers the sandbox's cgroup has three children
(`SCOPES`), and the limits sit so that the machinery is never the one that runs out:
- `machinery`: bubblewrap and the daemon (joined by the setup step; no limit of its own);
- `agent`: every process the daemon starts but a verification run (the agent's commands, the task's setup,
  services): `memory_mb` and `pids_max`, the limits the task asked for;
- `verifier`: each verification run (`run_verifier`), the same limits.
The sandbox's own cgroup holds `memory_mb + memory_reserve_mb(memory_mb)` and `pids_max + PIDS_RESERVE`, so
whatever the agent's processes and files (tmpfs pages stay charged to the agent's cgroup) take, the daemon
and a verification run still have the reserve: an agent at its limit meets its own cgroup's OOM killer and
pids limit, never bubblewrap's. The daemon moves each child into its scope (native/exec.c) through the
`cgroup.procs` files the setup step opened as host root (`fd=` items, passed on through bwrap), before the
child drops privileges; with no nested controller the sandbox's cgroup is flat, as before.
On cgroup v2 the sandbox's cgroup enables memory and pids for its children first (and holds no process).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evsys.sandbox.local.cgroups import SandboxCgroup

MACHINERY, AGENT, VERIFIER = "machinery", "agent", "verifier"
SCOPES = (MACHINERY, AGENT, VERIFIER)
NESTED = ("memory", "pids")  # the controllers whose limits are split by scope
PIDS_RESERVE = 64  # processes the daemon and a verification run have beyond the agent's pids_max
FD_BASE = 200  # the daemon's cgroup files: fds FD_BASE.. (agent's, then verifier's)


def memory_reserve_mb(memory_mb: int) -> int:
    """The memory the sandbox's cgroup holds beyond the agent's `memory_mb`: a quarter, at least 128 MiB,
    at most 1 GiB (bubblewrap and the daemon take a few MiB; the rest is the verification run's)."""
    return max(128, min(1024, memory_mb // 4))


def _memory_files(version: int, limit: int) -> list[tuple[str, str, str, bool]]:
    mb = str(limit * 1024 * 1024)
    if version == 2:
        return [("memory", "memory.max", mb, False), ("memory", "memory.swap.max", "0", True)]
    return [
        ("memory", "memory.limit_in_bytes", mb, False),
        ("memory", "memory.memsw.limit_in_bytes", mb, True),
    ]


def _cpu_files(version: int, cpus: float) -> list[tuple[str, str, str, bool]]:
    period = 100_000
    quota = max(1000, int(cpus * period))
    if version == 2:
        return [("cpu", "cpu.max", f"{quota} {period}", False)]
    return [("cpu", "cpu.cfs_period_us", str(period), False), ("cpu", "cpu.cfs_quota_us", str(quota), False)]


def limit_writes(
    version: int, memory_mb: int | None, pids_max: int, cpus: float | None, nested: bool
) -> list[tuple[str, str, str, str, bool]]:
    """(controller, scope, file, value, optional) of every limit to write (scope "": the sandbox's own)."""
    reserve = PIDS_RESERVE if nested else 0
    out = [("pids", "", "pids.max", str(pids_max + reserve), False)]
    if memory_mb is not None:
        total = memory_mb + (memory_reserve_mb(memory_mb) if nested else 0)
        out += [(ctrl, "", f, v, opt) for ctrl, f, v, opt in _memory_files(version, total)]
    for scope in (AGENT, VERIFIER) if nested else ():
        out.append(("pids", scope, "pids.max", str(pids_max), False))
        if memory_mb is not None:
            out += [(ctrl, scope, f, v, opt) for ctrl, f, v, opt in _memory_files(version, memory_mb)]
    if cpus is not None:
        out += [(ctrl, "", f, v, opt) for ctrl, f, v, opt in _cpu_files(version, cpus)]
    return out


def setup_items(cg: SandboxCgroup, memory_mb: int | None, pids_max: int, cpus: float | None) -> list[str]:
    """The setup step's cgroup items for `cg` (see the module docstring and native/setup.c)."""
    items = []
    nested = bool(cg.nested)
    if nested and cg.layout.version == 2:
        enable = " ".join(f"+{ctrl}" for ctrl in cg.nested)
        items.append(f"set={enable}:{cg.dirs[cg.nested[0]]}/cgroup.subtree_control")
    for ctrl, scope, filename, value, optional in limit_writes(
        cg.layout.version, memory_mb, pids_max, cpus, nested
    ):
        if ctrl in cg.dirs and (not scope or ctrl in cg.nested):
            directory = cg.dirs[ctrl] / scope if scope else cg.dirs[ctrl]
            items.append(f"{'try' if optional else 'set'}={value}:{directory}/{filename}")
    for fd, path in enumerate(daemon_files(cg), FD_BASE):
        items.append(f"fd={fd}:{path}")
    # v2 has one directory for every controller: with children, its processes all live in `machinery`
    every = nested and cg.layout.version == 2
    joins = [cg.dirs[ctrl] / MACHINERY if every or ctrl in cg.nested else cg.dirs[ctrl] for ctrl in cg.dirs]
    return items + [f"join={path}/cgroup.procs" for path in dict.fromkeys(map(str, joins))]


def daemon_files(cg: SandboxCgroup) -> list[str]:
    """The `cgroup.procs` files the daemon gets, the agent scope's then the verifier's (one per nested
    hierarchy: two on cgroup v1, one on v2)."""
    return [f"{directory}/cgroup.procs" for scope in (AGENT, VERIFIER) for directory in cg.scope_dirs(scope)]


def daemon_arguments(cg: SandboxCgroup) -> list[str]:
    """The daemon's cgroup argument, `<agent fds>/<verifier fds>` (comma-separated); none when flat."""
    files = daemon_files(cg)
    if not files:
        return []
    half = len(files) // 2
    fds = [str(FD_BASE + k) for k in range(len(files))]
    return [f"{','.join(fds[:half])}/{','.join(fds[half:])}"]
