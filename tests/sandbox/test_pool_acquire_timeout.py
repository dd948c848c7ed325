"""`SandboxPool.acquire(spec, timeout=...)`: a start bounded by a timeout never leaves a sandbox running,
even when the start finishes just as the wait gives up."""

from __future__ import annotations

import asyncio

import pytest

from evsys.records import ExecResult, SandboxSpec
from evsys.sandbox.base import Sandbox
from evsys.sandbox.pool import ReusePolicy, SandboxPool


class SlowStart(Sandbox):
    """A backend whose start takes `seconds` and, like a start that is past the point of no return, finishes
    its work even when cancelled."""

    seconds = 0.3
    running: list[SlowStart] = []

    async def start(self) -> None:
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # finishes anyway: the started sandbox comes back to the caller
        SlowStart.running.append(self)

    async def exec(self, command, *, cwd=None, env=None, timeout=None, user=None, stdin=None):  # noqa: ASYNC109
        return ExecResult(stdout_bytes=b"", stderr_bytes=b"", exit_code=0, timed_out=False, duration=0.0)

    async def kill_processes(self) -> int:
        return 0

    async def stop(self) -> None:
        if self in SlowStart.running:
            SlowStart.running.remove(self)


@pytest.fixture
def pool():
    SlowStart.running.clear()
    return SandboxPool(SlowStart, reuse=ReusePolicy(max_idle=4))


async def test_a_start_that_finishes_after_the_timeout_is_stopped(pool):
    started = await pool.acquire(SandboxSpec(name="control"))
    assert SlowStart.running == [started.sandbox]  # positive control: this backend's start leaves one running
    await started.sandbox.stop()
    with pytest.raises(TimeoutError):
        await pool.acquire(SandboxSpec(name="late"), timeout=0.05)
    assert SlowStart.running == []


async def test_a_cancelled_acquire_leaves_nothing_running(pool):
    waiter = asyncio.ensure_future(pool.acquire(SandboxSpec(name="cancelled"), timeout=30))
    await asyncio.sleep(0.05)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert SlowStart.running == []


async def test_a_start_within_the_timeout_is_handed_over(pool):
    lease = await pool.acquire(SandboxSpec(name="in-time"), timeout=5)
    assert SlowStart.running == [lease.sandbox]
    await lease.release(reusable=False)
    assert SlowStart.running == []
