"""The agent phase of a served episode: `EpisodeAgent` (what every kind of episode's agent gives the episode)
and `ServedAgent`, which runs the client's tool calls in the sandbox (the built-in tools and the task's MCP
servers) until submit or the step limit, once per step of a multi-step task."""

from __future__ import annotations

import asyncio
import secrets
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

from evsys.agent.base import Agent, AgentContext, AgentError, AgentResult
from evsys.agent.mcp_client import TaskMcpTools
from evsys.agent.tools import SandboxTools, ToolOutcome
from evsys.engine.episodes.catalog import SERVED_AGENT
from evsys.engine.episodes.protocol import CallToolAction
from evsys.records import Observation, ObservationResult, ToolCall
from evsys.sandbox.base import Sandbox
from evsys.util.version import __version__


@dataclass(frozen=True)
class EpisodeLimits:
    """Per-episode bounds: steps, seconds per step (a command's timeout), characters of tool output."""

    max_steps: int = 100
    step_timeout_sec: float = 30.0
    max_output_chars: int = 10_000


class EpisodeLeft(AgentError):
    """The client left the episode before it ended (reset, close, disconnect, idle timeout)."""


@dataclass
class _Request:
    call: CallToolAction
    reply: asyncio.Future[ToolOutcome]


class EpisodeAgent(Agent):
    """The agent phase of a served episode, fed by the episode: `ready` is set once it can take requests
    (put on `requests`, each kind of episode its own), `leave` ends it early. `instruction` and
    `tool_schemas` are what it was asked and offers (set once it runs; the task's and the built-in tools
    until then)."""

    ready: asyncio.Future[None]
    requests: asyncio.Queue[Any]
    instruction: str = ""
    tool_schemas: tuple[dict[str, Any], ...] = tuple(SandboxTools.schemas())

    @abstractmethod
    def leave(self, reason: str) -> None:
        """End the run at the next request boundary (the trial then verifies what was done)."""


class ServedAgent(EpisodeAgent):
    """The agent phase of a served episode: runs the client's tool calls (the built-in tools and the task's
    MCP servers' `mcp__<server>__<tool>`, started in the sandbox as `evsys run -a loop` starts them) until
    submit or the step limit. A multi-step task runs it once per step: `next_run` is set to the next step's
    instruction when it starts again after a submit."""

    name = SERVED_AGENT
    version = __version__

    def __init__(self, limits: EpisodeLimits) -> None:
        self.limits = limits
        loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[None] = loop.create_future()
        self.next_run: asyncio.Future[str] = loop.create_future()
        self.requests: asyncio.Queue[_Request | str] = asyncio.Queue()
        self.steps = 0
        self.left = asyncio.Event()
        self.left_reason = ""

    async def setup(self, sandbox: Sandbox, ctx: AgentContext) -> None:
        """Nothing to install: the tools run through the sandbox's exec daemon."""

    async def run(self, instruction: str, sandbox: Sandbox, ctx: AgentContext) -> AgentResult:
        """Execute requests as they arrive; return at submit or at the step limit (at once for a later step
        of a multi-step task when the limit was reached before it)."""
        if self.steps >= self.limits.max_steps:
            return AgentResult(metadata={"steps": self.steps, "ended_by": "max_steps"})
        workdir = ctx.task.environment.workdir or "/"
        limits = self.limits
        tools = SandboxTools(
            sandbox,
            workdir=workdir,
            command_timeout=limits.step_timeout_sec,
            max_output_chars=limits.max_output_chars,
        )
        servers = ctx.task.config.environment.mcp_servers
        mcp = TaskMcpTools(servers, sandbox, workdir=workdir, call_timeout=limits.step_timeout_sec)
        try:
            async with mcp:
                self.tool_schemas = (*SandboxTools.schemas(), *mcp.schemas())
                ctx.trajectory.agent.tool_definitions = list(self.tool_schemas)
                ctx.trajectory.add("user", instruction)
                self._started(instruction)
                return await self._serve(tools, mcp, ctx)
        finally:
            await tools.close()

    def _started(self, instruction: str) -> None:
        """Tell the episode this run takes requests: `ready` the first time, `next_run` after a submit."""
        self.instruction = instruction
        if not self.ready.done():
            self.ready.set_result(None)
        elif not self.next_run.done():
            self.next_run.set_result(instruction)

    async def _serve(self, tools: SandboxTools, mcp: TaskMcpTools, ctx: AgentContext) -> AgentResult:
        """The requests of one run, until submit or the step limit."""
        while True:
            request = await self.requests.get()
            if isinstance(request, str):
                raise EpisodeLeft(f"{request} after {self.steps} step(s), before submit")
            outcome = await self._execute_unless_left(tools, mcp, request.call, ctx)
            if outcome.submitted:  # replaced before the episode hears of the submit
                self.next_run = asyncio.get_running_loop().create_future()
            if not request.reply.done():
                request.reply.set_result(outcome)
            if outcome.error_kind in ("unknown_tool", "bad_arguments"):
                continue
            self.steps += 1
            if outcome.submitted:
                return AgentResult(metadata={"steps": self.steps, "ended_by": "submit"})
            if self.steps >= self.limits.max_steps:
                return AgentResult(metadata={"steps": self.steps, "ended_by": "max_steps"})

    async def _execute_unless_left(
        self, tools: SandboxTools, mcp: TaskMcpTools, call: CallToolAction, ctx: AgentContext
    ) -> ToolOutcome:
        """The tool call, abandoned (and the run ended) as soon as the client leaves the episode."""
        execution = asyncio.ensure_future(self._execute(tools, mcp, call, ctx))
        left = asyncio.ensure_future(self.left.wait())
        try:
            await asyncio.wait({execution, left}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
        if not execution.done():
            execution.cancel()
            raise EpisodeLeft(f"{self.left_reason} during step {self.steps + 1}, before submit")
        return execution.result()

    async def _execute(
        self, tools: SandboxTools, mcp: TaskMcpTools, call: CallToolAction, ctx: AgentContext
    ) -> ToolOutcome:
        call_id = f"call_{secrets.token_hex(6)}"
        tool_call = ToolCall(tool_call_id=call_id, function_name=call.tool_name, arguments=call.arguments)
        if call.tool_name in mcp:
            outcome = await mcp.call(tool_call, self.limits.max_output_chars)
        else:
            outcome = await tools.call(tool_call)
        # a Python task's verifier scores the last agent message: `submit`'s message is the answer
        message = str(call.arguments.get("message", "")) if outcome.submitted else ""
        ctx.trajectory.add(
            "agent",
            message,
            tool_calls=[tool_call],
            observation=Observation(
                results=[
                    ObservationResult(
                        source_call_id=call_id, content=outcome.content, is_error=outcome.is_error
                    )
                ]
            ),
        )
        return outcome

    def leave(self, reason: str) -> None:
        """End the run now: a running tool call is abandoned (the trial kills what it left and verifies)."""
        if not self.left.is_set():
            self.left_reason = reason
            self.left.set()
        self.requests.put_nowait(reason)
