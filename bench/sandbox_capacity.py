"""What sandboxes cost on this machine: evsys's local sandbox starts per second and memory per idle sandbox,
and what the machine allows at all — namespaces and bubblewrap sandboxes created per second without evsys.

`sandbox_starts(n)`: n local sandboxes started at once through the sandbox API, their rate, and their memory
when idle (their memory cgroups' usage, and the unique memory of their processes). `raw_rates()`:

each figure runs COUNT short-lived processes (`true`) 32 at a time through `xargs -P 32`, so nothing of
evsys or Python is on the path: `unshare --net` (a network namespace: what every no-network sandbox needs),
`unshare --mount --pid --fork --ipc --uts --net` (the namespaces of a sandbox), and bubblewrap with those
namespaces and a read-only /usr, /proc, /dev and a /tmp (a minimal sandbox, no overlay, no cgroups, no
daemon). bench/bench_concurrency.py prints them beside its own figures: N sandboxes cannot start faster than
N / rate seconds on this machine, whatever the orchestrator does.

Usage: `python bench/sandbox_capacity.py` (as root) prints both; bench/bench_concurrency.py runs them.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import psutil

COUNT = 512
PARALLEL = 32
BWRAP = [
    "bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--die-with-parent",
    "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
    "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
]  # fmt: skip
KINDS = {
    "netns_per_sec": ["unshare", "--net"],
    "sandbox_namespaces_per_sec": ["unshare", "--mount", "--pid", "--fork", "--ipc", "--uts", "--net"],
    "bwrap_sandboxes_per_sec": BWRAP,
}


def rate(prefix: list[str]) -> float | None:
    """COUNT runs of `prefix + [true]`, PARALLEL at a time: runs per second (None when a tool is missing or
    a run fails)."""
    if shutil.which(prefix[0]) is None:
        return None
    argv = ["xargs", "-P", str(PARALLEL), "-n", "1", "-I{}", *prefix, "true"]
    started = time.perf_counter()
    done = subprocess.run(argv, input="\n".join(map(str, range(COUNT))), text=True, capture_output=True)
    elapsed = time.perf_counter() - started
    return round(COUNT / elapsed, 1) if done.returncode == 0 else None


def raw_rates() -> dict[str, float | None]:
    """Every rate of KINDS."""
    return {name: rate(prefix) for name, prefix in KINDS.items()}


async def sandbox_starts(n: int) -> dict:
    """`n` local sandboxes started at once: starts per second, and memory per idle sandbox."""
    from evsys.records import SandboxSpec
    from evsys.sandbox import LocalSandbox

    boxes = [LocalSandbox(SandboxSpec(name=f"bench-conc-{os.getpid()}-{i}")) for i in range(n)]
    started = time.perf_counter()
    try:
        await asyncio.gather(*(box.start() for box in boxes))
        elapsed = time.perf_counter() - started
        await asyncio.sleep(0.5)  # idle
        cgroup_bytes, unique_bytes = await asyncio.to_thread(_sandbox_memory)
    finally:
        await asyncio.gather(*(box.stop() for box in boxes), return_exceptions=True)
    return {
        "sandboxes": n,
        "starts_per_sec": round(n / elapsed, 1),
        "cgroup_mb_per_idle_sandbox": round(cgroup_bytes / n / 2**20, 3),
        "unique_mb_per_idle_sandbox": round(unique_bytes / n / 2**20, 3),
    }


def _memory_cgroup(pid: int) -> Path | None:
    """The usage file of `pid`'s memory cgroup (v2 memory.current, v1 memory.usage_in_bytes)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            return Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.current"
        if "memory" in controllers.split(","):
            return Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.usage_in_bytes"
    return None


def _sandbox_memory() -> tuple[int, int]:
    """Memory of this process's descendants: the sum of their distinct memory cgroups' usage, and of their
    unique set sizes."""
    own = _memory_cgroup(os.getpid())
    cgroups: set[Path] = set()
    unique = 0
    for child in psutil.Process().children(recursive=True):
        try:
            unique += child.memory_full_info().uss
            usage = _memory_cgroup(child.pid)
        except (psutil.Error, OSError):
            continue
        if usage is not None and usage != own:
            cgroups.add(usage)
    total = 0
    for usage in cgroups:
        try:
            total += int(usage.read_text())
        except (OSError, ValueError):
            continue
    return total, unique


if __name__ == "__main__":
    print(json.dumps({"evsys": asyncio.run(sandbox_starts(256)), "without_evsys": raw_rates()}, indent=2))
