"""The spawner takes many start requests at once (pipelined): starts cancelled while their requests are queued
or out, and a spawner killed mid-burst, leave nothing behind, and the next start works."""

from __future__ import annotations

import asyncio
import os
import signal
import socket

import pytest
from sandbox_helpers import note_preexisting, own_cgroup_dirs, sandbox_mounts, sandbox_processes, spec

from evsys.sandbox import LocalSandbox, SandboxError
from evsys.sandbox.local import spawn

BURST = 48


@pytest.fixture(autouse=True)
def _only_this_tests_sandboxes():
    """Leak checks judge the sandboxes a test starts, not ones an earlier test left (those are warned of)."""
    note_preexisting()


async def _when_requests_are_out(at_least: int, starts: list[asyncio.Task]) -> int:
    """Wait until `at_least` start requests are queued for or out at the spawner at once (or every start
    is done); the most seen."""
    most = 0
    while most < at_least and not all(start.done() for start in starts):
        most = max(most, len(spawn._SPAWNER.waiting) + len(spawn._SPAWNER.outbox))
        await asyncio.sleep(0.0002)
    return most


async def _nothing_left(boxes: list[LocalSandbox]) -> None:
    await asyncio.gather(*(box.stop() for box in boxes), return_exceptions=True)
    assert own_cgroup_dirs() == []
    assert sandbox_processes() == []
    assert sandbox_mounts() == []


async def _next_start_works() -> None:
    async with LocalSandbox(spec()) as sb:
        assert (await sb.exec("echo ok")).stdout == "ok\n"


@pytest.mark.needs_sandbox
async def test_a_burst_larger_than_the_socket_takes_is_sent_as_it_drains():
    await _next_start_works()
    assert spawn._SPAWNER.sock is not None
    spawn._SPAWNER.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # a request or two at a time
    boxes = [LocalSandbox(spec()) for _ in range(16)]
    starts = [asyncio.create_task(box.start()) for box in boxes]
    backlog = False
    while not all(start.done() for start in starts):
        backlog |= spawn._SPAWNER.writing
        await asyncio.sleep(0)
    try:
        assert backlog  # positive control: requests waited for the socket to drain
        await asyncio.gather(*starts)
        outputs = await asyncio.gather(*(box.exec(f"echo {i}") for i, box in enumerate(boxes)))
        assert [out.stdout for out in outputs] == [f"{i}\n" for i in range(16)]
    finally:
        await _nothing_left(boxes)


@pytest.mark.needs_sandbox
async def test_starts_cancelled_while_their_requests_are_out_leave_nothing():
    await _next_start_works()  # the layers and the daemon are built
    boxes = [LocalSandbox(spec()) for _ in range(BURST)]
    starts = [asyncio.create_task(box.start()) for box in boxes]
    # positive control: several requests were out at the spawner at once when the starts were cancelled
    assert await _when_requests_are_out(4, starts) >= 4
    for start in starts:
        start.cancel()
    outcomes = await asyncio.gather(*starts, return_exceptions=True)
    assert sum(isinstance(outcome, asyncio.CancelledError) for outcome in outcomes) >= 4
    await _nothing_left(boxes)
    await _next_start_works()


@pytest.mark.needs_sandbox
async def test_a_spawner_killed_mid_burst_fails_those_starts_clearly_and_is_restarted():
    await _next_start_works()  # the spawner is up
    boxes = [LocalSandbox(spec()) for _ in range(BURST)]
    starts = [asyncio.create_task(box.start()) for box in boxes]
    assert await _when_requests_are_out(4, starts) >= 4  # positive control: it dies with requests out
    assert spawn._SPAWNER.proc is not None
    os.kill(spawn._SPAWNER.proc.pid, signal.SIGKILL)
    outcomes = await asyncio.gather(*starts, return_exceptions=True)
    failures = [str(outcome) for outcome in outcomes if isinstance(outcome, SandboxError)]
    assert any("the sandbox spawner exited" in failure for failure in failures), failures
    assert not [outcome for outcome in outcomes if isinstance(outcome, BaseException)] or failures
    await _nothing_left(boxes)
    await _next_start_works()


@pytest.mark.needs_sandbox
async def test_a_cgroup_name_left_by_an_earlier_run_fails_the_start_and_is_not_touched(monkeypatch):
    """The spawner makes a sandbox's cgroup directories; one that already exists (an earlier run's, with its
    processes) fails the start naming it, the directories made before it are removed, and the teardown
    leaves the existing one alone."""
    from evsys.sandbox.local import cgroups
    from evsys.sandbox.local.sandbox import _cgroup_layout

    layout = _cgroup_layout()
    name = cgroups.cgroup_name("left-behind")
    monkeypatch.setattr(cgroups, "cgroup_name", lambda *_args, **_kw: name)
    parents = [parent for ctrl, parent in layout.parents.items() if ctrl != "cpu" or layout.version != 1]
    existing = parents[-1] / name
    existing.mkdir()
    try:
        box = LocalSandbox(spec())
        with pytest.raises(SandboxError, match=f"cgroup {existing} already exists"):
            await box.start()
        assert existing.is_dir()  # not removed by the failed sandbox's teardown
        assert [parent for parent in parents[:-1] if (parent / name).exists()] == []
    finally:
        existing.rmdir()
    ok = LocalSandbox(spec())
    await ok.start()
    assert (await ok.exec("echo fine")).stdout == "fine\n"
    await _nothing_left([ok])


@pytest.mark.needs_sandbox
async def test_starts_cancelled_while_their_pipes_are_attached_leave_the_next_starts_working(monkeypatch):
    """A start cancelled while its pipes were being given transports used to close them under a live
    transport: the event loop kept watching those fd numbers, and the next sandbox whose stdout got one of
    them was never read (its start timed out). Cancelled as the attach begins, the next starts work."""
    from evsys.sandbox.local import sandbox as local_sandbox

    monkeypatch.setattr(local_sandbox, "START_TIMEOUT", 10.0)
    attaching = 0
    real_connect = spawn._connect

    async def connect(pipes, limit):
        nonlocal attaching
        attaching += 1
        return await real_connect(pipes, limit)

    monkeypatch.setattr(spawn, "_connect", connect)
    await _next_start_works()
    cancelled_attaching = 0
    for _ in range(12):
        box = LocalSandbox(spec())
        seen = attaching
        start = asyncio.create_task(box.start())
        while attaching == seen and not start.done():  # noqa: ASYNC110 - cancel as it attaches its pipes
            await asyncio.sleep(0)
        cancelled_attaching += not start.done()
        start.cancel()
        with pytest.raises(asyncio.CancelledError):
            await start
        await _nothing_left([box])
        pair = [LocalSandbox(spec()) for _ in range(2)]  # the next ones get the numbers those pipes had
        await asyncio.gather(*(sb.start() for sb in pair))
        outputs = await asyncio.gather(*(sb.exec("echo ok") for sb in pair))
        assert [out.stdout for out in outputs] == ["ok\n", "ok\n"]
        await _nothing_left(pair)
    assert cancelled_attaching >= 6  # positive control: the cancellations did land in the attach
