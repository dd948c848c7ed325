"""Fixtures for the red-team suite: every test runs hostile code in a real local sandbox.

Every test here must be able to fail: it first proves that its attack really ran (a positive control: the
attack leaves a marker or an observable effect the test checks), and only then asserts that the attack failed.

The no-op switch: with EVSYS_SECURITY_NOOP=1 in the environment, an autouse fixture below replaces the
command path of `LocalSandbox` (`exec`, `exec_program` and the shells built on them, all through
`_exec_request`) by one that runs nothing and returns exit 0 with empty output, and its `spawn` by one that
starts `true` whatever was asked (the Modal stand-in runs each exec that way). Sandboxes still start, stop
and reset for real. A test whose assertions only check that something is *absent* passes against such a
sandbox, which means it protects nothing: test_suite_fails_without_a_sandbox.py runs this whole directory with
the switch on and fails when a test other than the few it lists passes. The switch patches the class, so it
covers every sandbox a test makes in this process, through these fixtures or directly (`LocalSandbox(...)`,
an in-process Job); it does not reach an orchestrator started as a subprocess: such a test needs its own
positive control that the switch can break (e.g. a marker file written by the attack and read on the host).
"""

from __future__ import annotations

import pytest
from redteam import noop_exec_request, noop_mode, noop_spawn, redteam_spec

from evsys.sandbox import LocalSandbox
from slot_backends import daytona_standin, e2b_standin, modal_standin, slot_backend

# the slot tests' backends and their stand-ins (tests/slot_backends.py)
__all__ = ["daytona_standin", "e2b_standin", "modal_standin", "slot_backend"]


@pytest.fixture(autouse=True)
def _noop_sandbox(monkeypatch):
    """With EVSYS_SECURITY_NOOP=1, every LocalSandbox command does nothing (see the module docstring)."""
    if noop_mode():
        monkeypatch.setattr(LocalSandbox, "_exec_request", noop_exec_request)
        monkeypatch.setattr(LocalSandbox, "spawn", noop_spawn)


@pytest.fixture
async def sandbox():
    """A running default (no-network) sandbox."""
    async with LocalSandbox(redteam_spec()) as sb:
        yield sb


@pytest.fixture
async def make_sandbox():
    """Factory for sandboxes with custom limits; every one is stopped at teardown (stop() is idempotent, so
    tests that check teardown stop theirs explicitly first)."""
    made: list[LocalSandbox] = []

    async def make(**kw) -> LocalSandbox:
        sb = LocalSandbox(redteam_spec(**kw))
        made.append(sb)
        await sb.start()
        return sb

    yield make
    for sb in made:
        await sb.stop()
