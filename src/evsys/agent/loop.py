"""The `loop` agent: a built-in tool-calling agent that records token-exact trajectories.

Each turn sends the chat so far (system prompt, instruction, earlier turns and tool results) with the tool
schemas (`bash`, `read_file`, `write_file`, `str_replace`, `submit`) to the model, runs the tool calls in the
sandbox and appends their results. It stops when the model calls `submit`, answers without a tool call, or
hits `max_turns`, the `token_budget` (total completion tokens) or the context window.

Per model turn the trajectory step records the prompt ids, completion ids, sampling logprobs and a loss mask
(1 for every completion token: exactly the tokens the model generated), usage and cost, and
`extends_previous`: whether this turn's prompt starts with the previous turn's prompt + completion tokens. A
break (a template that re-renders history differently, an elided observation) is recorded with
`prefix_break_at`, never papered over. A turn cut off mid-generation (the agent timeout) is recorded with the
tokens sampled so far (`evsys.model.partial`), marked `finish_reason="cut_short"`. `max_tokens` defaults to
the model provider's `turn_max_tokens` (short turns on the CPU-bound local engine).

Context strategy (`context_strategy="elide_observations"`, the default): when the model reports a context
overflow, the oldest tool result not yet elided is replaced by a short marker and the turn is retried; each
elision is recorded on the step (`context_events`) and counted. When nothing is left to elide, or with
`context_strategy="stop"`, the run ends with stop reason `context_window`.

Malformed tool calls (invalid JSON, unknown tool, bad arguments) become error observations for the model and
are counted in the result's metadata.

A task's MCP servers (`[environment] mcp_servers`) are reached from inside the sandbox and their tools are
offered beside the built-in ones as `mcp__<server>__<tool>` (evsys.agent.mcp_client). The first model call is
made while the sandbox starts unless the task has MCP servers: their tools are known only once it runs.

A Python task's own tool selection (`VerifiedTask(tools=[...])`, evsys.task.turns) replaces the built-in set:
only what it names is offered and callable (evsys.agent.toolset), its custom tools run host-side
(evsys.agent.host_tools). Its `respond` hook answers every turn without a tool call: the reply is the next
user message (a `user` step; its tokens are context, loss mask 0, in the next turn's prompt) until the hook
says done (stop reason `environment_done`); `max_turns` of the task wins over the agent's. Such a task runs
here even without a sandbox (then with no system prompt unless the task or `system_prompt=` gives one).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evsys.agent.base import Agent, AgentContext, AgentError, AgentResult, ModelCallError
from evsys.agent.host_tools import HostTools, Responder, load_task_hooks
from evsys.agent.loop_turns import (  # ELIDED, prefix_check: part of the loop agent's API
    ELIDED,
    elide_oldest_observation,
    history_message,
    prefix_check,
    record_cut_short,
)
from evsys.agent.mcp_client import TaskMcpTools
from evsys.agent.tools import SandboxTools, ToolOutcome
from evsys.agent.toolset import Toolset, builtin_schemas
from evsys.model.base import Completion, Message, ModelClient, SamplingParams
from evsys.model.errors import ContextOverflowError, ModelError
from evsys.model.partial import watch_partial
from evsys.model.registry import turn_max_tokens
from evsys.records import Observation, ObservationResult, StepMetrics, ToolCall
from evsys.sandbox.base import Sandbox

DEFAULT_SYSTEM_PROMPT = (
    "You are an autonomous agent working in a Linux sandbox. Use the tools to complete the task: run "
    "commands, read and edit files, and check your work. When the task is done, call submit."
)
StopReason = Literal[
    "submitted", "no_tool_call", "environment_done", "max_turns", "token_budget", "context_window"
]


class LoopConfig(BaseModel):
    """Settings of the loop agent (given as `--agent-kwarg key=value`)."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(30, ge=1)
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="Completion tokens per model turn; default: the model provider's (96 on the local "
        "engine, else 1024).",
    )
    token_budget: int | None = Field(None, ge=1, description="Total completion tokens over the run.")
    temperature: float = Field(0.7, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int | None = Field(
        None, description="Turn n samples with seed + n (reproducible on the local engine)."
    )
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    command_timeout_sec: float = Field(120.0, gt=0)
    max_output_chars: int = Field(
        10_000, ge=200, description="Tool outputs are clipped to this (head + tail)."
    )
    context_strategy: Literal["elide_observations", "stop"] = "elide_observations"


class LoopStats(BaseModel):
    """Counters reported in the agent result's metadata."""

    turns: int = 0
    stop_reason: StopReason = "max_turns"
    tool_calls: int = 0
    tool_errors: int = 0
    parse_errors: int = 0
    unknown_tools: int = 0
    bad_arguments: int = 0
    prefix_breaks: int = 0
    context_elisions: int = 0
    mcp_tools: list[str] = Field(default_factory=list)
    environment_turns: int = Field(0, description="Replies of the task's respond hook.")
    completion_tokens: int = 0
    model_time_s: float = 0.0
    tool_time_s: float = 0.0


@dataclass
class _Opening:
    """The start of a run: the model client, the chat so far, the counters and the first turn's completion
    (None: the context window is full) with its context events."""

    client: ModelClient
    messages: list[Message]
    stats: LoopStats
    schemas: list[dict[str, Any]]
    max_tokens: int
    completion: Completion | None = None
    events: list[str] = field(default_factory=list)


class LoopAgent(Agent):
    """The built-in tool-calling agent. See the module docstring."""

    name = "loop"
    model_use = "required"
    version = "1.0"

    starts_before_sandbox = True  # the first model call needs only the instruction

    def __init__(self, **kwargs: Any) -> None:
        self.config = LoopConfig(**kwargs)
        self._opening: _Opening | None = None  # what run_early got, for run to continue from
        self._hooks: tuple[HostTools, Responder | None] | None = None  # the task's, once loaded

    def initial_messages(self, instruction: str, system_prompt: str | None = None) -> list[Message]:
        """The chat a run starts from: the system prompt (the agent's own by default) and the instruction."""
        return [
            {"role": "system", "content": system_prompt or self.config.system_prompt},
            {"role": "user", "content": instruction},
        ]

    def _system_prompt(self, ctx: AgentContext, sandboxed: bool) -> str | None:
        """A Python task's own prompt, else the agent's; without a sandbox only one given explicitly (the
        default one speaks of a sandbox)."""
        if ctx.task.system_prompt or sandboxed or "system_prompt" in self.config.model_fields_set:
            return ctx.task.system_prompt or self.config.system_prompt
        return None

    async def _task_hooks(self, ctx: AgentContext) -> tuple[HostTools, Responder | None]:
        """The task's custom tools and respond hook, loaded once, bounded by the command timeout."""
        if self._hooks is None:
            cfg = self.config
            self._hooks = await load_task_hooks(
                ctx.task.interaction,
                ctx.task.path,
                limit=cfg.command_timeout_sec,
                max_output_chars=cfg.max_output_chars,
            )
        return self._hooks

    async def setup(self, sandbox: Sandbox, ctx: AgentContext) -> None:
        """Nothing to install: the tools run through the sandbox's own exec and shell."""

    async def run_early(self, instruction: str, ctx: AgentContext) -> None:
        """The first model call (it needs only the instruction), made while the trial's sandbox starts; not
        when the task has MCP servers, whose tools the first call must offer and only the sandbox can list."""
        if not ctx.task.config.environment.mcp_servers:
            host, _ = await self._task_hooks(ctx)
            schemas = [*builtin_schemas(ctx.task.interaction), *host.schemas()]  # Toolset's order
            self._opening = await self._open(instruction, ctx, schemas)

    async def _open(
        self, instruction: str, ctx: AgentContext, schemas: list[dict[str, Any]], sandboxed: bool = True
    ) -> _Opening:
        """The chat so far (system prompt, instruction) recorded, and the first turn's completion."""
        if ctx.model_client is None:
            raise AgentError("the loop agent needs a model: pass -m, e.g. -m local or -m openai:gpt-4.1")
        system_prompt = self._system_prompt(ctx, sandboxed)
        messages = self.initial_messages(instruction, system_prompt)
        if system_prompt is None:
            messages = messages[1:]
        max_tokens = self.config.max_tokens or turn_max_tokens(ctx.model_name)
        opening = _Opening(
            client=ctx.model_client,
            messages=messages,
            stats=LoopStats(),
            schemas=list(schemas),
            max_tokens=max_tokens,
        )
        ctx.trajectory.agent.tool_definitions = list(schemas)  # what SFT exports need
        if system_prompt is not None:
            ctx.trajectory.add("system", system_prompt)
        ctx.trajectory.add("user", instruction)
        opening.completion = await self._turn(ctx, opening, 0, opening.events)
        return opening

    async def run(self, instruction: str, sandbox: Sandbox | None, ctx: AgentContext) -> AgentResult:
        """Run turns until submit, a final answer, or a limit; every turn is recorded in ctx.trajectory.
        `sandbox` is None for a Python task without one (its custom tools and respond hook only)."""
        opening, self._opening = self._opening, None
        cfg = self.config
        host, responder = await self._task_hooks(ctx)
        tools = mcp = None
        if sandbox is not None:
            tools = SandboxTools(
                sandbox,
                workdir=ctx.workdir,
                command_timeout=cfg.command_timeout_sec,
                max_output_chars=cfg.max_output_chars,
            )
            servers = ctx.task.config.environment.mcp_servers
            mcp = TaskMcpTools(servers, sandbox, workdir=ctx.workdir, call_timeout=cfg.command_timeout_sec)
        try:
            async with mcp or contextlib.nullcontext():
                toolset = Toolset(ctx.task.interaction, tools, host, mcp)
                if opening is None:
                    opening = await self._open(instruction, ctx, toolset.schemas(), sandbox is not None)
                opening.stats.mcp_tools = toolset.mcp_names()
                return await self._turns(ctx, opening, toolset, responder)
        finally:
            if tools is not None:
                await tools.close()

    async def _turns(
        self, ctx: AgentContext, opening: _Opening, toolset: Toolset, responder: Responder | None
    ) -> AgentResult:
        """The run's turns from the opening one, with the run's tools and the task's respond hook."""
        cfg = self.config
        messages, stats = opening.messages, opening.stats
        previous: Completion | None = None
        max_turns = ctx.task.interaction.max_turns or cfg.max_turns
        for turn in range(max_turns):
            events = opening.events if turn == 0 else []
            if turn == 0:
                completion = opening.completion
            else:
                if cfg.token_budget is not None and stats.completion_tokens >= cfg.token_budget:
                    stats.stop_reason = "token_budget"
                    break
                completion = await self._turn(ctx, opening, turn, events)
            if completion is None:
                stats.stop_reason = "context_window"
                ctx.trajectory.add("system", "stopped: the context window is full", context_events=events)
                break
            stats.turns += 1
            stats.completion_tokens += completion.usage.completion_tokens
            outcomes = [await self._run_tool(toolset, call, stats) for call in completion.tool_calls]
            self._record(ctx, completion, outcomes, previous, events, stats)
            previous = completion
            messages.append(history_message(completion))
            for call, outcome in zip(completion.tool_calls, outcomes, strict=True):
                messages.append(
                    {"role": "tool", "tool_call_id": call.tool_call_id, "content": outcome.content}
                )
            if any(o.submitted for o in outcomes):
                stats.stop_reason = "submitted"
                break
            if not completion.tool_calls and not await self._environment_turn(
                ctx, responder, messages, stats, last=turn + 1 >= max_turns
            ):
                break
        return AgentResult(metadata=stats.model_dump())

    async def _environment_turn(
        self,
        ctx: AgentContext,
        responder: Responder | None,
        messages: list[Message],
        stats: LoopStats,
        *,
        last: bool,
    ) -> bool:
        """After a turn without a tool call: the respond hook's reply appended and recorded (True: the run
        goes on), or the stop reason set (False). No reply is asked for after the last allowed turn."""
        if responder is None:
            stats.stop_reason = "no_tool_call"
            return False
        if last:
            stats.stop_reason = "max_turns"
            return False
        reply = await responder.reply(messages)
        if reply is None:
            stats.stop_reason = "environment_done"
            return False
        messages.append({"role": "user", "content": reply})
        ctx.trajectory.add("user", reply)
        stats.environment_turns += 1
        return True

    async def _turn(
        self, ctx: AgentContext, opening: _Opening, turn: int, events: list[str]
    ) -> Completion | None:
        """One turn's model call within the token budget, its time counted; None when nothing more fits. A
        call cut off mid-generation (the agent timeout) is recorded with the tokens it sampled so far."""
        cfg = self.config
        stats = opening.stats
        ctx.emit({"type": "turn", "data": {"turn": turn + 1}})  # `evsys run`'s progress: "agent turn N"
        budget = opening.max_tokens
        if cfg.token_budget is not None:
            budget = min(budget, cfg.token_budget - stats.completion_tokens)
        started = time.perf_counter()
        try:
            with watch_partial() as partial:
                try:
                    return await self._complete(opening, turn, budget, events)
                except asyncio.CancelledError:
                    record_cut_short(ctx, partial.completion(ctx.model_name or ""), events)
                    raise
        finally:
            stats.model_time_s += time.perf_counter() - started

    async def _complete(
        self, opening: _Opening, turn: int, max_tokens: int, events: list[str]
    ) -> Completion | None:
        """One model call, eliding old observations on context overflow; None when nothing more fits."""
        cfg = self.config
        messages = opening.messages
        params = SamplingParams(
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_tokens=max_tokens,
            seed=None if cfg.seed is None else cfg.seed + turn,
        )
        while True:
            try:
                return await opening.client.complete(messages, tools=opening.schemas, params=params)
            except ContextOverflowError as exc:
                if cfg.context_strategy == "stop" or not elide_oldest_observation(messages):
                    events.append(f"context window full, stopping: {exc}")
                    return None
                opening.stats.context_elisions += 1
                events.append(f"elided the oldest tool output: {exc}")
            except ModelError as exc:
                raise ModelCallError(f"model call failed: {exc}") from exc

    async def _run_tool(self, toolset: Toolset, call: ToolCall, stats: LoopStats) -> ToolOutcome:
        started = time.perf_counter()
        outcome = await toolset.call(call, self.config.max_output_chars)
        stats.tool_time_s += time.perf_counter() - started
        stats.tool_calls += 1
        if outcome.is_error:
            stats.tool_errors += 1
            kind = {
                "parse": "parse_errors",
                "unknown_tool": "unknown_tools",
                "bad_arguments": "bad_arguments",
            }
            if outcome.error_kind in kind:
                setattr(stats, kind[outcome.error_kind], getattr(stats, kind[outcome.error_kind]) + 1)
        return outcome

    def _record(
        self,
        ctx: AgentContext,
        completion: Completion,
        outcomes: list[ToolOutcome],
        previous: Completion | None,
        events: list[str],
        stats: LoopStats,
    ) -> None:
        extends, break_at = prefix_check(previous, completion)
        if extends is False:
            stats.prefix_breaks += 1
        metrics = StepMetrics.from_completion(completion, extends_previous=extends, prefix_break_at=break_at)
        calls = [
            ToolCall(
                tool_call_id=c.tool_call_id,
                function_name=c.function_name,
                arguments=c.arguments if c.parse_error is None else {"_raw": c.arguments_json()},
                parse_error=c.parse_error,
            )
            for c in completion.tool_calls
        ]
        results = [
            ObservationResult(source_call_id=c.tool_call_id, content=o.content, is_error=o.is_error)
            for c, o in zip(completion.tool_calls, outcomes, strict=True)
        ]
        ctx.trajectory.add(
            "agent",
            completion.text,
            tool_calls=calls or None,
            observation=Observation(results=results) if results else None,
            metrics=metrics,
            finish_reason=completion.finish_reason,
            context_events=events or None,
        )


__all__ = ["ELIDED", "LoopAgent", "LoopConfig", "LoopStats", "history_message", "prefix_check"]
