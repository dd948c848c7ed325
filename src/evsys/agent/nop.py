"""The `nop` agent: does nothing, so a task's tests can be checked to fail on an untouched environment."""

from __future__ import annotations

from evsys.agent.base import Agent, AgentContext, AgentResult
from evsys.records import Usage
from evsys.sandbox.base import Sandbox


class NopAgent(Agent):
    """An agent that leaves the sandbox exactly as it found it."""

    name = "nop"
    model_use = "none"
    version = "1.0"

    async def setup(self, sandbox: Sandbox, ctx: AgentContext) -> None:
        """Nothing to install."""

    async def run(self, instruction: str, sandbox: Sandbox, ctx: AgentContext) -> AgentResult:
        """Record the instruction and do nothing."""
        ctx.trajectory.add("user", instruction)
        return AgentResult(usage=Usage())
