"""The orchestrator's file descriptors: the limit raised once at start, and a reserve that connections from
sandboxes never take, so writing a trial's result never fails because another trial opened too many."""

from __future__ import annotations

import resource
from pathlib import Path

RESERVED_DESCRIPTORS = 128  # the top of the descriptor range: never used for an accepted connection
_NR_OPEN = Path("/proc/sys/fs/nr_open")


def raise_descriptor_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (the kernel's `nr_open` when the hard limit
    is unlimited); returns the soft limit now in force. Idempotent, and harmless where it cannot be raised
    (any process may raise its own soft limit to the hard one, so sandboxes inheriting it gain nothing)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else _nr_open()
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft
        return target
    return soft


def _nr_open() -> int:
    try:
        return int(_NR_OPEN.read_text())
    except (OSError, ValueError):
        return 1 << 20


def in_reserve(fd: int) -> bool:
    """True when descriptor `fd` lies in the reserve at the top of the range. The kernel hands out the lowest
    free number, so an accepted connection numbered this high means fewer than `RESERVED_DESCRIPTORS` are
    left: the connection is to be closed at once, keeping them for result files and sandbox control."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft != resource.RLIM_INFINITY and fd >= soft - RESERVED_DESCRIPTORS
