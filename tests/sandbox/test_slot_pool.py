"""The slot pool over the backends of SLOT_BACKENDS (tests/slot_backends.py): 2 sandboxes x 10 slots serving
20 concurrent trajectories with isolated workspaces, `max_sandboxes` (acquire waits for a release),
`min_sandboxes` started ahead of demand, idle sandboxes above it stopped, and `close` stopping the rest."""

from __future__ import annotations

import asyncio
import os
import shutil
from itertools import count

import pytest

from evsys.records import SandboxSpec
from evsys.sandbox.base import SandboxError
from evsys.sandbox.slots import SlotPool

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")
_names = count()
PEEK = (
    "for i in $(seq 0 9); do cat /slots/$i/notes/mine.txt 2>/dev/null; done; echo; id -u; pwd; echo $TMPDIR"
)


def _spec() -> SandboxSpec:
    return SandboxSpec(name=f"slotpool-{os.getpid()}-{next(_names)}")


async def test_two_sandboxes_of_ten_slots_serve_twenty_concurrent_trajectories(slot_backend):
    async with SlotPool(_spec(), backend=slot_backend, slots_per_sandbox=10, max_sandboxes=2) as pool:
        slots = await asyncio.gather(*(pool.acquire(f"traj-{i}") for i in range(20)))
        assert pool.started_sandboxes == 2 and len({s.sandbox for s in slots}) == 2
        assert len({(s.sandbox, s.uid) for s in slots}) == 20
        writes = [(s, "write_file", {"path": "notes/mine.txt", "content": s.trajectory_id}) for s in slots]
        assert all(r.success for r in await pool.execute_batch(writes))
        peeks = await pool.execute_batch([(s, "bash", {"command": PEEK}) for s in slots])
        for slot, peek in zip(slots, peeks, strict=True):
            # of the ten workspaces in its sandbox it reads its own file only
            assert peek.output.split() == [slot.trajectory_id, str(slot.uid), slot.workspace, slot.tmp]
        reads = await pool.execute_batch([(s, "read_file", {"path": "notes/mine.txt"}) for s in slots])
        assert [r.output for r in reads] == [s.trajectory_id for s in slots]
        await asyncio.gather(*(pool.release(s) for s in slots))
        again = await pool.acquire("after")
        listing = await pool.exec_tool(again, "bash", {"command": "ls -A; ls -A $TMPDIR"})
        assert listing.success and listing.output == ""  # released slots are handed over empty
        assert pool.started_sandboxes == 2


async def test_acquire_waits_for_a_release_when_max_sandboxes_are_full(slot_backend, eventually):
    async with SlotPool(_spec(), backend=slot_backend, slots_per_sandbox=2, max_sandboxes=1) as pool:
        a, b = await pool.acquire("a"), await pool.acquire("b")
        third = asyncio.create_task(pool.acquire("c"))
        await eventually(lambda: pool.waiting == 1, "the third acquire waits")
        assert not third.done()
        await pool.release(b)
        c = await third
        assert (c.sandbox, c.uid, c.trajectory_id) == (b.sandbox, b.uid, "c")  # b's slot, no new sandbox
        assert pool.started_sandboxes == 1
        with pytest.raises(TimeoutError):
            await pool.acquire("d", timeout=0.2)
        assert pool.waiting == 0
        await pool.release(a)
        assert (await pool.acquire("e")).uid == a.uid


@pytest.mark.needs_sandbox
async def test_one_slot_per_sandbox_waits_at_max_sandboxes_too(eventually):
    async with SlotPool(_spec(), max_sandboxes=1) as pool:
        a = await pool.acquire("a")
        second = asyncio.create_task(pool.acquire("b"))
        await eventually(lambda: pool.waiting == 1, "the second acquire waits")
        assert not second.done()
        await pool.release(a)
        b = await second
        assert b.sandbox is a.sandbox and pool.was_reused(b)  # a's sandbox, reset, and no second one
        await pool.release(b)
        await pool.release(b)  # a second release changes nothing
        c = await pool.acquire("c", timeout=60)
        assert c.sandbox is a.sandbox
        with pytest.raises(TimeoutError):
            await pool.acquire("d", timeout=0.2)
    assert c.sandbox.agent_uid is None  # leaving the block stopped the sandbox of the slot still taken


async def test_min_sandboxes_are_kept_started_and_idle_ones_above_it_stopped(slot_backend, eventually):
    pool = SlotPool(_spec(), backend=slot_backend, slots_per_sandbox=2, min_sandboxes=1, idle_timeout_sec=0)
    async with pool:
        assert len(pool.shared_sandboxes) == 1  # started ahead of the first trajectory
        slots = [await pool.acquire(f"t{i}") for i in range(3)]
        boxes = {slot.sandbox for slot in slots}
        assert len(boxes) == 2 and pool.shared_sandboxes[0] in boxes and pool.started_sandboxes == 2
        for slot in slots:
            await pool.release(slot)
        await eventually(lambda: len(pool.shared_sandboxes) == 1, "the idle sandbox above the minimum stops")
        (kept,) = pool.shared_sandboxes
        (gone,) = boxes - {kept}
        await asyncio.wait_for(_until_stopped(gone), 120)
        assert (await kept.exec("echo up")).stdout == "up\n"
    with pytest.raises(SandboxError, match="not running"):
        await kept.exec("true")  # close stopped the one kept


async def _until_stopped(sandbox) -> None:
    while True:
        try:
            await sandbox.exec("true")
        except SandboxError:
            return
        await asyncio.sleep(0.05)
