"""Harness mode (`evsys serve --harness NAME -m MODEL`, RFC 005): one step is one harness turn.

The episode's agent phase starts the harness in the episode's sandbox as `evsys run -a NAME` does (install
cached, recording model proxy, forwarder; evsys.agent.harness.agent.HarnessAgent), then sends it one message
per `{"type": "message", "message": ...}` step. The harness keeps its context between turns; its events
(LLM_REQUEST, TOOL_CALL, TEXT_OUTPUT, ..., TURN_COMPLETE) come back in the step's observation, or one frame
each as they happen when the WebSocket request says `"stream": true`. `submit` (a `call_tool` action), the
step limit or a failed turn ends the agent phase; the trial's verifier chain scores the sandbox as it stands,
and the proxy's model calls (token ids, logprobs) are the episode's trajectory.
"""

from __future__ import annotations

import asyncio
from typing import Any

from evsys.agent.base import AgentContext, AgentError, AgentResult
from evsys.agent.harness.adapter import HarnessAdapter
from evsys.agent.harness.agent import EVENTS_FILE, HarnessAgent, offered_tools
from evsys.agent.harness.events import EventLog, HarnessEventType
from evsys.agent.registry import resolve_agent
from evsys.engine.episodes.episode import Episode, EpisodeAgent, EpisodeLeft, EpisodeLimits, EventSink
from evsys.engine.episodes.protocol import (
    CallToolAction,
    ErrorCode,
    MessageAction,
    ServedObservation,
    ServeError,
    ToolError,
)
from evsys.records import SandboxSpec
from evsys.sandbox.base import Sandbox
from evsys.util.atomic import write_text_atomic


def resolve_harness(name: str, options: dict[str, Any] | None = None) -> HarnessAgent:
    """A fresh `HarnessAgent` for `name` (a catalog harness or a `module:Class` harness agent)."""
    agent = resolve_agent(name, dict(options or {}))
    if not isinstance(agent, HarnessAgent):
        raise ValueError(f"--harness {name}: {type(agent).__name__} is not a harness agent (HarnessAgent)")
    return agent


class _Turn:
    """One queued step: a message for the harness (None: submit), where its events go, and its answer."""

    def __init__(self, message: str | None, sink: EventSink | None) -> None:
        self.message = message
        self.sink = sink
        self.reply: asyncio.Future[EventLog] = asyncio.get_running_loop().create_future()


class ServedHarnessAgent(EpisodeAgent):
    """The agent phase of a harness episode: the harness started once, then one turn per queued message."""

    def __init__(self, harness: HarnessAgent, limits: EpisodeLimits) -> None:
        self.harness = harness
        self.name = harness.name
        self.version = harness.version
        self.limits = limits
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.requests: asyncio.Queue[_Turn | str] = asyncio.Queue()
        self.turns = 0
        self.events = EventLog()  # the whole episode's, bounded

    async def prepare_sandbox(self, spec: SandboxSpec, ctx: AgentContext) -> SandboxSpec:
        """The harness's binds (install tree, proxy socket) on the episode's sandbox."""
        return await self.harness.prepare_sandbox(spec, ctx)

    async def setup(self, sandbox: Sandbox, ctx: AgentContext) -> None:
        """Start the harness's forwarder in the sandbox."""
        await self.harness.setup(sandbox, ctx)

    async def run(self, instruction: str, sandbox: Sandbox, ctx: AgentContext) -> AgentResult:
        """Start the harness, then run a turn per message until submit, the step limit or a failed turn."""
        adapter = self.harness.build_adapter(
            sandbox,
            ctx.workdir,
            self.limits.step_timeout_sec,
            mcp_servers=ctx.task.config.environment.mcp_servers,
        )
        try:
            await adapter.start()
            self.ready.set_result(None)
            while True:
                request = await self.requests.get()
                if isinstance(request, str):
                    raise EpisodeLeft(f"{request} after {self.turns} turn(s), before submit")
                if request.message is None:
                    request.reply.set_result(EventLog())
                    return AgentResult(metadata={"turns": self.turns, "ended_by": "submit"})
                events = await self._turn(adapter, request.message, request)
                self.turns += 1
                last = events.last
                if last is None or last.data.get("status") != "ok":
                    reason = str(last.data.get("error")) if last is not None else "no events"
                    raise AgentError(f"harness {self.name!r}: turn {self.turns} failed: {reason}")
                if self.turns >= self.limits.max_steps:
                    return AgentResult(metadata={"turns": self.turns, "ended_by": "max_steps"})
        finally:
            await adapter.stop()
            await self._save(ctx)

    async def _turn(self, adapter: HarnessAdapter, message: str, request: _Turn) -> EventLog:
        events = EventLog()
        try:
            async for event in adapter.send_message_streaming(message):
                events.append(event)
                if request.sink is not None:
                    await request.sink(event)
        finally:
            self.events.extend(events)
            if not request.reply.done():
                request.reply.set_result(events)
        return events

    async def _save(self, ctx: AgentContext) -> None:
        """The proxy's model calls into the trajectory, the events to agent/harness-events.jsonl."""
        session = self.harness.plumbing.session if self.harness.plumbing is not None else None
        if session is not None:
            ctx.trajectory.extend(session.to_steps())
            ctx.trajectory.agent.tool_definitions = offered_tools(session.calls)
        await asyncio.to_thread(ctx.logs_dir.mkdir, parents=True, exist_ok=True)
        await asyncio.to_thread(write_text_atomic, ctx.logs_dir / EVENTS_FILE, self.events.jsonl())

    def leave(self, reason: str) -> None:
        """End the run at the next request boundary."""
        self.requests.put_nowait(reason)

    async def close(self) -> None:
        """Stop the harness's adapter, forwarder, proxy session and proxy."""
        await self.harness.close()


class HarnessEpisode(Episode[ServedHarnessAgent]):
    """An episode whose steps are harness turns (`message`) and whose `submit` ends it."""

    def _start_metadata(self) -> dict[str, Any]:
        return {**super()._start_metadata(), "harness": self.agent.name, "tools": ["submit"]}

    async def step(
        self, action: CallToolAction | MessageAction, sink: EventSink | None = None
    ) -> tuple[ServedObservation, float | None, bool]:
        """One harness turn (or `submit`); the final step carries the verifier's reward."""
        self._require_running()
        if not isinstance(action, CallToolAction | MessageAction):
            raise ServeError(ErrorCode.VALIDATION_ERROR, "harness mode takes message and call_tool actions")
        if isinstance(action, CallToolAction) and action.tool_name != "submit":
            error = ToolError(
                error_type="tool_not_found",
                message=f"harness mode takes message actions and the submit tool, not {action.tool_name!r}",
            )
            return ServedObservation(tool_name=action.tool_name, error=error), None, False
        turn = _Turn(action.message if isinstance(action, MessageAction) else None, sink)
        await self.agent.requests.put(turn)
        events = await self._wait_reply(turn.reply, self.limits.step_timeout_sec)
        if events is None or isinstance(action, CallToolAction):
            return await self.final(ServedObservation(tool_name="submit" if events is not None else None))
        self.step_count += 1
        observation = ServedObservation(
            text="\n".join(
                str(e.data.get("text", "")) for e in events if e.type == HarnessEventType.TEXT_OUTPUT
            ),
            events=None if sink is not None else [e.model_dump(mode="json") for e in events],
            metadata={
                "step": self.step_count,
                "turn_status": events.last.data.get("status") if events.last else None,
            },
        )
        failed = events.last is not None and events.last.data.get("status") != "ok"
        if self.agent.turns >= self.limits.max_steps or failed:
            return await self.final(observation)
        return observation, None, False
