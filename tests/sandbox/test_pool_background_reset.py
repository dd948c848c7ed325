"""`Lease.release(..., wait=False)`: a sandbox kept for the next trial is reset in the background. The
next acquire of its spec waits for that reset instead of starting another sandbox, and gets it clean; `close`
waits for resets in flight, so nothing is left running."""

from __future__ import annotations

import asyncio
import os

import pytest

from evsys.records import SandboxSpec
from evsys.sandbox.local.cgroups import detect_layout
from evsys.sandbox.pool import SandboxPool


def sandbox_cgroups() -> set[str]:
    """This process's local sandboxes' cgroups (one per running sandbox)."""
    names: set[str] = set()
    for parent in detect_layout().parents.values():
        names |= {p.name for p in parent.glob(f"evsys-{os.getpid()}-*")}
    return names


SLEEPING = "cat /proc/[0-9]*/comm 2>/dev/null | grep -qx sleep"  # a `sleep` runs in the sandbox


@pytest.fixture
async def pool():
    pool = SandboxPool.for_backend("local", max_idle=4)
    yield pool
    await pool.close()


@pytest.mark.needs_sandbox
async def test_the_next_acquire_takes_the_sandbox_being_reset_and_gets_it_clean(pool):
    lease = await pool.acquire(SandboxSpec(name="one"))
    first = lease.sandbox
    left = await first.exec("echo mine > /tmp/left; sleep 300 >/dev/null 2>&1 &", user="root")
    # positive control: the file and the process are there before the release
    assert left.exit_code == 0
    assert (await first.exec("cat /tmp/left", user="root")).stdout.strip() == "mine"
    started = "for i in $(seq 250); do " + SLEEPING + " && exit 0; sleep 0.02; done; exit 1"
    assert (await first.exec(started, user="root")).exit_code == 0
    await lease.release(wait=False)
    assert pool.idle_count == 0  # handed back before its reset ended
    again = await pool.acquire(SandboxSpec(name="two"))
    second = again.sandbox
    assert second is first and again.reused
    assert pool.started == 1, "a second sandbox was started while the first one was being reset"
    assert (await second.exec("cat /tmp/left", user="root")).exit_code != 0
    assert (await second.exec(SLEEPING, user="root")).exit_code != 0
    await again.release()


@pytest.mark.needs_sandbox
async def test_acquires_beyond_the_resets_in_flight_start_their_own(pool):
    leases = [await pool.acquire(SandboxSpec(name=f"a{i}")) for i in range(2)]
    for lease in leases:
        await lease.release(wait=False)
    again = await asyncio.gather(*(pool.acquire(SandboxSpec(name=f"b{i}")) for i in range(3)))
    assert sum(lease.reused for lease in again) == 2 and pool.started == 3
    for lease in again:
        await lease.release()


@pytest.mark.needs_sandbox
async def test_closing_waits_for_the_resets_in_flight_and_leaves_nothing_running():
    before = sandbox_cgroups()
    pool = SandboxPool.for_backend("local", max_idle=4)
    leases = [await pool.acquire(SandboxSpec(name=f"c{i}")) for i in range(3)]
    assert len(sandbox_cgroups() - before) == 3  # positive control: three sandboxes run
    for lease in leases:
        await lease.release(wait=False)
    await pool.close()
    assert sandbox_cgroups() - before == set()


@pytest.mark.needs_sandbox
async def test_whether_a_sandbox_is_kept_is_decided_when_it_is_released():
    """A job's pool keeps a released sandbox only while a trial not started yet can take it (`demand`). The
    next trial starts (demand falls to 0) before the background reset runs: the sandbox must still be kept
    for it, not stopped and replaced by a new start."""
    waiting = {"trials": 1}
    before = sandbox_cgroups()
    pool = SandboxPool.for_backend("local", max_idle=4, demand=lambda: waiting["trials"])
    try:
        first = await pool.acquire(SandboxSpec(name="d1"))
        await first.release(wait=False)  # one trial still to come: kept
        waiting["trials"] = 0  # that trial starts now, before the reset has run
        second = await pool.acquire(SandboxSpec(name="d2"))
        assert second.sandbox is first.sandbox and pool.started == 1
        await second.release(wait=False)  # nobody left: stopped before the release returns
        assert pool.idle_count == 0 and sandbox_cgroups() - before == set()
    finally:
        await pool.close()
