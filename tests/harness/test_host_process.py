"""Harnesses run on the host (trusted ones, tests): kill() takes the whole process tree down."""

from __future__ import annotations

import asyncio
import os

from evsys.agent.harness import HostProcessLauncher

TREE = "setsid sleep 7741 & sleep 7742 & (setsid bash -c 'sleep 7743 & wait') & echo started; wait"


def sleeps_of(marker: str) -> list[int]:
    """Host pids running `sleep <marker>...`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv[0] == b"sleep" and argv[1:2] and argv[1].startswith(marker.encode()):
                found.append(int(entry))
    return found


async def test_kill_takes_down_children_in_other_sessions(tmp_path):
    process = await HostProcessLauncher().launch(["bash", "-c", TREE], env={}, cwd=str(tmp_path))
    assert await asyncio.wait_for(process.stdout.readline(), 10) == b"started\n"
    for _ in range(100):  # the three sleeps start in the background
        if len(await asyncio.to_thread(sleeps_of, "774")) == 3:
            break
        await asyncio.sleep(0.02)
    assert len(await asyncio.to_thread(sleeps_of, "774")) == 3
    await asyncio.wait_for(process.kill(), 10)  # a surviving child holding stdout would hang the wait
    for _ in range(100):  # SIGKILLed processes vanish once reaped by their parents or init
        if not await asyncio.to_thread(sleeps_of, "774"):
            break
        await asyncio.sleep(0.02)
    assert await asyncio.to_thread(sleeps_of, "774") == []
