"""Small reads of /proc on the host."""

from __future__ import annotations

import os


def children(pid: int) -> list[int]:
    """The direct children of `pid` (from every thread's `children` file); [] when it is gone."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return found
