"""Agents for the processes-executor tests, loaded by name (`process_executor_agents:Class`) in the worker
processes, as a user's own agent would be."""

from __future__ import annotations

import asyncio
import os

from evsys.agent import Agent, AgentResult

GATE_ENV = "EVSYS_TEST_PROCESS_GATE"


class PidAgent(Agent):
    """Solves the task after `seconds` (and, when $EVSYS_TEST_PROCESS_GATE names a file, once that file
    exists) and reports the id of the process it ran in, in its metadata and as a live event."""

    name = "pid"

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds

    async def setup(self, sandbox, ctx) -> None:
        return None

    async def run(self, instruction, sandbox, ctx) -> AgentResult:
        ctx.emit({"type": "pid", "pid": os.getpid()})
        await asyncio.sleep(self.seconds)
        gate = os.environ.get(GATE_ENV)
        while gate and not await asyncio.to_thread(os.path.exists, gate):  # noqa: ASYNC110 (a file: no event)
            await asyncio.sleep(0.05)
        await sandbox.exec("echo ok > /app/out.txt")
        return AgentResult(metadata={"pid": os.getpid()})
