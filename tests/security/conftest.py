"""Fixtures for the red-team suite: every test runs hostile code in a real local sandbox."""

from __future__ import annotations

import itertools
import os

import pytest

from evsys.sandbox import LocalSandbox, SandboxSpec

_names = itertools.count()


def redteam_spec(**kw) -> SandboxSpec:
    """A spec with a unique name (the red team's sandboxes)."""
    kw.setdefault("name", f"redteam-{os.getpid()}-{next(_names)}")
    return SandboxSpec(**kw)


@pytest.fixture
async def sandbox():
    """A running default (no-network) sandbox."""
    async with LocalSandbox(redteam_spec()) as sb:
        yield sb


@pytest.fixture
def make_sandbox():
    """Factory for sandboxes with custom limits; all are stopped at teardown."""
    made: list[LocalSandbox] = []

    async def make(**kw) -> LocalSandbox:
        sb = LocalSandbox(redteam_spec(**kw))
        made.append(sb)
        await sb.start()
        return sb

    yield make
    # stop() is idempotent; tests stop their sandboxes explicitly when they check teardown


def host_pids_with(marker: str) -> list[int]:
    """Host pids whose command line contains `marker` (not zombies)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read()
            with open(f"/proc/{entry}/status") as f:
                zombie = "\nState:\tZ" in f.read()
        except OSError:
            continue
        if marker.encode() in argv and not zombie:
            found.append(int(entry))
    return found
