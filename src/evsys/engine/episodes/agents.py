"""The agent phase of a served episode: `EpisodeAgent` (what every kind of episode's agent gives the episode)
and `ServedAgent`, which runs the client's tool calls in the sandbox (the built-in tools and the task's MCP
servers) until submit or the step limit, once per step of a multi-step task.

A Python task's own tools (evsys.task.turns) are what a `ServedAgent` offers: its selection of built-in
tools, its custom tools (run host-side, as under `-a loop`) and its MCP tools. A task with a respond hook
takes `message` actions: the message is the model's turn, the hook's reply comes back as the observation's
`text` (and is the trajectory's next user step); the hook saying done ends the episode like `submit`."""

from __future__ import annotations

import asyncio
import secrets
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

from evsys.agent.base import Agent, AgentContext, AgentError, AgentResult
from evsys.agent.host_tools import Responder, load_task_hooks
from evsys.agent.mcp_client import TaskMcpTools
from evsys.agent.tools import SandboxTools, ToolOutcome
from evsys.agent.toolset import Toolset
from evsys.engine.episodes.catalog import SERVED_AGENT
from evsys.engine.episodes.protocol import CallToolAction, MessageAction
from evsys.model.base import Message
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


class _Finished:
    """The request that ends a served run normally (`ServedAgent.finish`)."""


FINISHED = _Finished()


@dataclass
class _Request:
    call: CallToolAction | MessageAction
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
    takes_messages: bool = False  # `message` actions: a harness's turns, or a task's respond hook

    @abstractmethod
    def leave(self, reason: str) -> None:
        """End the run at the next request boundary (the trial then verifies what was done)."""

    def finish(self) -> None:
        """The client ends the run as the model's last turn would (a task that offers no `submit`): the
        trial verifies what was done. By default the same as leaving."""
        self.leave("the client finished the episode")


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
        self.requests: asyncio.Queue[_Request | str | _Finished] = asyncio.Queue()
        self.steps = 0
        self.left = asyncio.Event()
        self.left_reason = ""
        self.responder: Responder | None = None
        self.history: list[Message] = []  # the chat so far, as the respond hook sees it

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
        interaction, base = ctx.task.interaction, ctx.task.path
        host, self.responder = await load_task_hooks(
            interaction, base, limit=limits.step_timeout_sec, max_output_chars=limits.max_output_chars
        )
        self.takes_messages = self.responder is not None
        try:
            async with mcp:
                toolset = Toolset(interaction, tools, host, mcp)
                self.tool_schemas = tuple(toolset.schemas())
                ctx.trajectory.agent.tool_definitions = list(self.tool_schemas)
                ctx.trajectory.add("user", instruction)
                self.history = [{"role": "user", "content": instruction}]
                self._started(instruction)
                return await self._serve(toolset, ctx)
        finally:
            await tools.close()

    def _started(self, instruction: str) -> None:
        """Tell the episode this run takes requests: `ready` the first time, `next_run` after a submit."""
        self.instruction = instruction
        if not self.ready.done():
            self.ready.set_result(None)
        elif not self.next_run.done():
            self.next_run.set_result(instruction)

    async def _serve(self, toolset: Toolset, ctx: AgentContext) -> AgentResult:
        """The requests of one run, until submit or the step limit."""
        while True:
            request = await self.requests.get()
            if isinstance(request, str):
                raise EpisodeLeft(f"{request} after {self.steps} step(s), before submit")
            if isinstance(request, _Finished):
                return AgentResult(metadata={"steps": self.steps, "ended_by": "client_finished"})
            outcome = await self._execute_unless_left(toolset, request.call, ctx)
            if outcome.submitted:  # replaced before the episode hears of the submit
                self.next_run = asyncio.get_running_loop().create_future()
            if not request.reply.done():
                request.reply.set_result(outcome)
            if outcome.error_kind in ("unknown_tool", "bad_arguments"):
                continue
            self.steps += 1
            if outcome.submitted:
                ended_by = "environment_done" if isinstance(request.call, MessageAction) else "submit"
                return AgentResult(metadata={"steps": self.steps, "ended_by": ended_by})
            if self.steps >= self.limits.max_steps:
                return AgentResult(metadata={"steps": self.steps, "ended_by": "max_steps"})

    async def _execute_unless_left(
        self, toolset: Toolset, call: CallToolAction | MessageAction, ctx: AgentContext
    ) -> ToolOutcome:
        """The tool call (or message), abandoned (and the run ended) as soon as the client leaves."""
        if isinstance(call, MessageAction):
            execution = asyncio.ensure_future(self._message(call.message, ctx))
        else:
            execution = asyncio.ensure_future(self._execute(toolset, call, ctx))
        left = asyncio.ensure_future(self.left.wait())
        try:
            await asyncio.wait({execution, left}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
        if not execution.done():
            execution.cancel()
            raise EpisodeLeft(f"{self.left_reason} during step {self.steps + 1}, before submit")
        return execution.result()

    async def _message(self, message: str, ctx: AgentContext) -> ToolOutcome:
        """The model's turn as a message, answered by the task's respond hook (`submitted`: it is done)."""
        assert self.responder is not None
        ctx.trajectory.add("agent", message)
        self.history.append({"role": "assistant", "content": message})
        reply = await self.responder.reply(self.history)
        if reply is None:
            return ToolOutcome(content="", submitted=True)
        ctx.trajectory.add("user", reply)
        self.history.append({"role": "user", "content": reply})
        return ToolOutcome(content=reply)

    async def _execute(self, toolset: Toolset, call: CallToolAction, ctx: AgentContext) -> ToolOutcome:
        call_id = f"call_{secrets.token_hex(6)}"
        tool_call = ToolCall(tool_call_id=call_id, function_name=call.tool_name, arguments=call.arguments)
        outcome = await toolset.call(tool_call, self.limits.max_output_chars)
        self.history += [
            {"role": "assistant", "content": "", "tool_calls": [_wire_call(tool_call)]},
            {"role": "tool", "tool_call_id": call_id, "content": outcome.content},
        ]
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

    def finish(self) -> None:
        """End the run after the requests already sent, as the model's last turn would: no failure, the
        trial verifies what was done (`ended_by: client_finished`)."""
        self.requests.put_nowait(FINISHED)

    def leave(self, reason: str) -> None:
        """End the run now: a running tool call is abandoned (the trial kills what it left and verifies)."""
        if not self.left.is_set():
            self.left_reason = reason
            self.left.set()
        self.requests.put_nowait(reason)


def _wire_call(call: ToolCall) -> dict[str, Any]:
    """A tool call in the OpenAI chat shape (what the respond hook's history holds)."""
    function = {"name": call.function_name, "arguments": call.arguments_json()}
    return {"id": call.tool_call_id, "type": "function", "function": function}
