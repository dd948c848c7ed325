"""A proxy session: one trial's key, its model client, and the record of every model call made with that key.

`ProxySession.calls` holds one `ProxyCall` per request (the chat as the model saw it, in OpenAI shape, the
tools, the sampling parameters and the `Completion` with token ids and logprobs, or the error).
`to_steps()` turns the calls into ATIF steps for the trial's trajectory: one agent step per successful
call, user/system steps for the messages the harness added between calls, and tool results attached as the
observation of the step whose tool call they answer."""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from evsys.model.base import Completion, Message, ModelClient, SamplingParams, ToolSchema
from evsys.records import Observation, ObservationResult, Step, StepMetrics, ToolCall, utc_now

log = logging.getLogger(__name__)

Dialect = Literal["openai", "anthropic", "responses", "google"]
CallListener = Callable[[Literal["request", "response"], "ProxyCall"], None]
KEY_PREFIX = "evsys-"


def new_session_key() -> str:
    """A fresh, unguessable session key (used as the harness's API key)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


class ProxyCall(BaseModel):
    """One model request made through the proxy and what came back."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: int = Field(description="0-based position in the session.")
    dialect: Dialect
    requested_model: str = Field("", description="The model name the harness asked for.")
    stream: bool = False
    messages: list[Message] = Field(description="The chat in OpenAI shape, exactly as given to the client.")
    tools: list[ToolSchema] | None = None
    params: SamplingParams
    completion: Completion | None = None
    error: str | None = None
    notes: list[str] = Field(
        default_factory=list,
        description="What of the request the model never saw (unsupported tools, items).",
    )
    started_at: str = Field(default_factory=utc_now)
    latency_s: float = 0.0


class ProxyToolCall(BaseModel):
    """One environment tool call made through the session's MCP endpoint (`/mcp`)."""

    index: int = Field(description="0-based position among the session's tool calls.")
    name: str = Field(description="The tool name the harness called (its exposed name).")
    tool: str = Field("", description="The environment's tool it was routed to ('' when refused).")
    arguments: dict[str, Any] = Field(default_factory=dict)
    output: str = Field("", description="The text the harness got back.")
    is_error: bool = False
    error: str | None = Field(None, description="Why evsys refused or failed the call, if it did.")
    started_at: str = Field(default_factory=utc_now)
    duration_s: float = 0.0


class McpApp(Protocol):
    """The ASGI app answering a session's `/mcp` requests (evsys.agent.harness.mcp_server.ToolServer)."""

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        """Answer one HTTP request."""

    async def aclose(self) -> None:
        """Close the app's tool sessions."""


class ProxySession:
    """One trial's access to the proxy: its key, its model client, and the calls recorded so far.

    `mcp_app`, when set (see `evsys.agent.harness.mcp_server.serve_tools`), is the ASGI app that answers this
    session's authorised `/mcp` requests; `tool_calls` records the environment tool calls it served."""

    def __init__(self, key: str, model_client: ModelClient) -> None:
        self.key = key
        self.model_client = model_client
        self.calls: list[ProxyCall] = []
        self.tool_calls: list[ProxyToolCall] = []
        self.mcp_app: McpApp | None = None
        self.closed = False
        self._listeners: list[CallListener] = []

    def record_tool_call(
        self,
        name: str,
        tool: str,
        arguments: dict[str, Any],
        *,
        output: str = "",
        is_error: bool = True,
        error: str | None = None,
        duration_s: float,
    ) -> ProxyToolCall:
        """Append one tool call to `tool_calls` (a refused call: `tool=""` and the reason in `error`)."""
        call = ProxyToolCall(
            index=len(self.tool_calls),
            name=name,
            tool=tool,
            arguments=arguments,
            output=output or (error or ""),
            is_error=is_error,
            error=error,
            duration_s=duration_s,
        )
        self.tool_calls.append(call)
        return call

    def __repr__(self) -> str:
        return f"ProxySession(key={self.key[:10]}..., calls={len(self.calls)})"

    def add_listener(self, listener: CallListener) -> None:
        """Call `listener(kind, call)` when a request arrives ("request") and ends ("response")."""
        self._listeners.append(listener)

    def remove_listener(self, listener: CallListener) -> None:
        """Stop notifying `listener` (no error when it was not registered)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def begin_call(
        self,
        dialect: Dialect,
        requested_model: str,
        messages: list[Message],
        tools: list[ToolSchema] | None,
        params: SamplingParams,
        *,
        stream: bool,
        notes: list[str] | None = None,
    ) -> ProxyCall:
        """Record the start of a call and notify listeners."""
        call = ProxyCall(
            notes=list(notes or []),
            index=len(self.calls),
            dialect=dialect,
            requested_model=requested_model,
            stream=stream,
            messages=messages,
            tools=tools,
            params=params,
        )
        self.calls.append(call)
        self._notify("request", call)
        return call

    def finish_call(
        self, call: ProxyCall, completion: Completion | None, error: str | None, latency_s: float
    ) -> None:
        """Record how a call ended and notify listeners."""
        call.completion = completion
        call.error = error
        call.latency_s = latency_s
        self._notify("response", call)

    def _notify(self, kind: Literal["request", "response"], call: ProxyCall) -> None:
        for listener in list(self._listeners):
            try:
                listener(kind, call)
            except Exception:  # a broken listener must not fail the harness's model call
                log.exception("proxy call listener failed")

    def completions(self) -> list[Completion]:
        """The completions of the successful calls, in order."""
        return [c.completion for c in self.calls if c.completion is not None]

    def to_steps(self) -> list[Step]:
        """The recorded calls as ATIF steps (numbered from 1; a recorder renumbers them when extending)."""
        return calls_to_steps(self.calls)


def _fingerprint(message: Message) -> str:
    """Identity of a message across requests (assistant turns by their text and tool-call ids only, since
    harnesses re-send them in slightly different shapes)."""
    calls = [c.get("id") for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    fields = [message.get("role"), _text(message.get("content")), message.get("tool_call_id"), calls]
    return json.dumps(fields, default=str)


def _extended_history(histories: list[list[str]], current: list[str]) -> list[str] | None:
    """The longest earlier conversation (request + reply) that `current` continues, if any.

    In the usual agent loop each request extends an earlier one, and only the appended messages are new, so a
    user who repeats "continue" gets a step each time. Side conversations (titles, summaries) are separate
    histories and do not break this."""
    best: list[str] | None = None
    for history in histories:
        if len(history) <= len(current) and current[: len(history)] == history:
            if best is None or len(history) > len(best):
                best = history
    return best


def _text(content: Any) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def _agent_step(step_id: int, call: ProxyCall, completion: Completion) -> Step:
    metrics = StepMetrics.from_completion(completion)
    tool_calls = [
        ToolCall(tool_call_id=c.tool_call_id, function_name=c.function_name, arguments=c.arguments)
        for c in completion.tool_calls
    ]
    return Step(
        step_id=step_id,
        timestamp=call.started_at,
        source="agent",
        message=completion.text,
        tool_calls=tool_calls or None,
        metrics=metrics,
        model_name=completion.model or call.requested_model,
        proxy_call_index=call.index,
        latency_s=call.latency_s,
    )


def calls_to_steps(calls: list[ProxyCall]) -> list[Step]:
    """ATIF steps for `calls`: new system/user messages, one agent step per completion, tool results as
    observations of the step that made the call. Messages re-sent in later requests are not repeated."""
    steps: list[Step] = []
    seen: set[str] = set()
    by_call_id: dict[str, Step] = {}
    histories: list[list[str]] = []
    for call in calls:
        if call.completion is None:
            continue
        prints = [_fingerprint(m) for m in call.messages]
        extended = _extended_history(histories, prints)
        start = len(extended) if extended is not None else 0
        for index in range(start, len(prints)):
            if extended is None and prints[index] in seen:
                continue  # no earlier conversation continues here: skip what was already recorded
            seen.add(prints[index])
            _add_message_step(steps, by_call_id, call.messages[index])
        step = _agent_step(len(steps) + 1, call, call.completion)
        steps.append(step)
        histories.append([*prints, _fingerprint(call.completion.to_message())])
        seen.add(histories[-1][-1])
        for tool_call in call.completion.tool_calls:
            by_call_id[tool_call.tool_call_id] = step
    return steps


def _add_message_step(steps: list[Step], by_call_id: dict[str, Step], message: Message) -> None:
    """A user/system step for `message`, or (tool results) an observation on the step that made the call."""
    role = message.get("role")
    if role == "tool":
        owner = by_call_id.get(str(message.get("tool_call_id")))
        if owner is not None:
            owner.observation = owner.observation or Observation()
            result = ObservationResult(
                source_call_id=message.get("tool_call_id"), content=_text(message.get("content"))
            )
            owner.observation.results.append(result)
    elif role in ("system", "user"):
        steps.append(Step(step_id=len(steps) + 1, source=role, message=_text(message.get("content"))))
