"""Custom agents for the engine tests, loaded by name (`engine_agents:Class`) like a user's own agent."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from evsys.agent import Agent, AgentError, AgentResult, ModelCallError

COUNTER_ENV = "EVSYS_TEST_COUNTER"


def _bump() -> int:
    path = Path(os.environ[COUNTER_ENV])
    count = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(count))
    return count


class FlakyAgent(Agent):
    """Fails its first `failures` runs (counted in a host file), then solves the task."""

    name = "flaky"

    def __init__(self, failures: int = 2) -> None:
        self.failures = failures

    async def setup(self, sandbox, ctx) -> None:
        return None

    async def run(self, instruction, sandbox, ctx) -> AgentResult:
        count = _bump()
        if count <= self.failures:
            raise AgentError(f"flaky failure {count}")
        await sandbox.exec("echo ok > /app/out.txt")
        return AgentResult()


class SleepyAgent(Agent):
    """Sleeps far past any test timeout."""

    name = "sleepy"

    async def setup(self, sandbox, ctx) -> None:
        return None

    async def run(self, instruction, sandbox, ctx) -> AgentResult:
        _bump()
        await asyncio.sleep(600)
        return AgentResult()


class BrokenModelAgent(Agent):
    """Every run fails the way an unreachable model server does."""

    name = "broken-model"

    async def setup(self, sandbox, ctx) -> None:
        return None

    async def run(self, instruction, sandbox, ctx) -> AgentResult:
        raise ModelCallError("server unreachable: connection refused")


class ModelEchoAgent(Agent):
    """Reports which model client and model name the trial handed it."""

    name = "model-echo"

    async def setup(self, sandbox, ctx) -> None:
        return None

    async def run(self, instruction, sandbox, ctx) -> AgentResult:
        await sandbox.exec("echo ok > /app/out.txt")
        return AgentResult(metadata={"client": ctx.model_client.label, "model": ctx.model_name})


class SlowPreparingAgent(Agent):
    """Spends `seconds` in prepare_sandbox and again in setup (each alone within a 1 s setup timeout)."""

    name = "slow-preparing"

    def __init__(self, seconds: float = 0.7) -> None:
        self.seconds = seconds

    async def prepare_sandbox(self, spec, ctx):
        await asyncio.sleep(self.seconds)
        return spec

    async def setup(self, sandbox, ctx) -> None:
        await asyncio.sleep(self.seconds)

    async def run(self, instruction, sandbox, ctx) -> AgentResult:
        await sandbox.exec("echo ok > /app/out.txt")
        return AgentResult()


class EnvCheckAgent(Agent):
    """Solves the task only when `ctx.env` holds TOKEN and FROM_FILE as `--agent-env`/`--env-file` gave them
    (their values start with `secret-`); reports only the names it saw."""

    name = "env-check"

    async def setup(self, sandbox, ctx) -> None:
        return None

    async def run(self, instruction, sandbox, ctx) -> AgentResult:
        if all(ctx.env.get(name, "").startswith("secret-") for name in ("TOKEN", "FROM_FILE")):
            await sandbox.exec("echo ok > /app/out.txt")
        return AgentResult(metadata={"env_names": sorted(ctx.env)})


class TalkingAgent(Agent):
    """Records the instruction and one reply, and leaves the task undone (reward 0)."""

    name = "talking"

    async def setup(self, sandbox, ctx) -> None:
        return None

    async def run(self, instruction, sandbox, ctx) -> AgentResult:
        ctx.trajectory.add("user", instruction)
        ctx.trajectory.add("agent", "I will not do it.")
        return AgentResult()
