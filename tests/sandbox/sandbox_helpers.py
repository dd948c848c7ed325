"""Helpers for local-sandbox tests: specs with unique names and host-side leak probes."""

from __future__ import annotations

import itertools
import os
import warnings
from pathlib import Path

from evsys.records import SandboxSpec

_names = itertools.count()
# Sandboxes of this test process already running when a leak test started (left by an earlier test): the leak
# tests judge only what they started themselves, and say what they found (see note_preexisting).
PREEXISTING: dict[str, set] = {"processes": set(), "mounts": set()}


def spec(**kw) -> SandboxSpec:
    """A spec with a unique name."""
    kw.setdefault("name", f"test-{os.getpid()}-{next(_names)}")
    return SandboxSpec(**kw)


def _descends_from_us(pid: str) -> bool:
    """True when `pid` is this test process or its descendant (other sessions may run sandboxes too)."""
    me = os.getpid()
    cur = int(pid)
    for _ in range(64):
        if cur == me:
            return True
        if cur <= 1:
            return False
        try:
            stat = Path(f"/proc/{cur}/stat").read_text()
        except OSError:
            return False
        cur = int(stat[stat.rfind(")") + 2 :].split()[1])
    return False


def note_preexisting() -> None:
    """Remember the sandboxes running now (before a leak test), so that only later ones count; warn about
    them, naming their pids: an earlier test left them running."""
    PREEXISTING["processes"], PREEXISTING["mounts"] = set(), set()
    processes, mounts = sandbox_processes(), sandbox_mounts()
    PREEXISTING["processes"], PREEXISTING["mounts"] = set(processes), set(mounts)
    if processes:
        warnings.warn(f"sandbox processes left running by an earlier test: {sorted(processes)}", stacklevel=2)


def sandbox_mounts() -> list[str]:
    """Mount lines of evsys sandboxes in the mount table of this process or any of its descendants, but for
    those noted by `note_preexisting`."""
    found = []
    for mi in Path("/proc").glob("[0-9]*/mountinfo"):
        if not _descends_from_us(mi.parent.name):
            continue
        try:
            text = mi.read_text()
        except OSError:
            continue
        found += [
            f"{mi}: {line}" for line in text.splitlines() if "evsys-root" in line or "evsys-storage" in line
        ]
    return [line for line in found if line not in PREEXISTING["mounts"]]


def sandbox_processes() -> list[int]:
    """Host pids of sandbox daemons started by this test process (descendants that are not zombies)."""
    pids = []
    marker = f"/evsys-{os.getpid()}-"
    for cmd in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if (
                marker in (cmd.parent / "cgroup").read_text()
                and "\nState:\tZ" not in (cmd.parent / "status").read_text()
            ):
                pids.append(int(cmd.parent.name))
                continue
        except OSError:
            continue
        if not _descends_from_us(cmd.parent.name):
            continue
        try:
            argv = cmd.read_bytes().split(b"\0")
            status = (cmd.parent / "status").read_text()
        except OSError:
            continue
        if any(b"/.evsys/daemon" in a for a in argv) and "\nState:\tZ" not in status:
            pids.append(int(cmd.parent.name))
    return [pid for pid in pids if pid not in PREEXISTING["processes"]]


def own_cgroup_dirs() -> list[Path]:
    """evsys cgroup directories owned by this test process."""
    from evsys.sandbox.local.cgroups import detect_layout

    out = []
    for parent in detect_layout().parents.values():
        out += [p for p in parent.glob(f"evsys-{os.getpid()}-*")]
    return out
