"""Custom tools (a Python task's functions) run in the orchestrator's process, and the task's respond hook.

Both are trusted author code; what reaches them from the model is not. A custom tool's arguments are
validated against its signature (pydantic, never evaluated) before the call: a call that does not fit is a
`bad_arguments` outcome and the function never runs. A sync function runs in a worker thread, an async one
on the loop, both bounded by the call limit: past it the model is told the tool timed out (a sync function's
thread cannot be stopped and finishes in the background). Whatever the function raises is shown to the model
as the tool's error. The return value is shown as text (JSON for anything but a string), clipped.

The respond hook (`Responder`) gets the chat so far and its own state; its failure or timeout ends the trial
as `agent_error` (`EnvironmentResponseError`), naming the hook.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evsys.agent.base import AgentError
from evsys.agent.tools import ToolOutcome, clip
from evsys.model.base import Message
from evsys.records import ToolCall
from evsys.task.turns import (
    STATE_PARAMETER,
    CustomTool,
    Done,
    Interaction,
    load_custom_tools,
    load_hook,
)


async def call_bounded(fn: Callable[..., Any], limit: float, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` within `limit` seconds: awaited when async, in a worker thread when sync;
    TimeoutError past the limit."""

    async def invoke() -> Any:
        if inspect.iscoroutinefunction(fn):
            return await fn(*args, **kwargs)
        result = await asyncio.to_thread(fn, *args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    return await asyncio.wait_for(invoke(), limit)


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _argument_problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, err['loc'])) or 'arguments'}: {err['msg']}" for err in exc.errors())


def episode_state(interaction: Interaction) -> dict[str, Any]:
    """The state an episode starts with, shared by its respond hook and custom tools: a copy of the data."""
    return copy.deepcopy(interaction.data)


class HostTools:
    """A task's custom tools, run host-side: `schemas()`, `name in tools`, `await call(tool_call)`; a tool
    taking `state` gets the episode's `state`."""

    def __init__(
        self,
        tools: Sequence[CustomTool],
        *,
        call_timeout: float,
        max_output_chars: int,
        state: dict[str, Any] | None = None,
    ) -> None:
        self.tools = {tool.name: tool for tool in tools}
        self.call_timeout = call_timeout
        self.max_output_chars = max_output_chars
        self.state = state if state is not None else {}

    @classmethod
    def for_task(
        cls,
        interaction: Interaction,
        base_dir: Path | None,
        *,
        call_timeout: float,
        max_output_chars: int,
        state: dict[str, Any] | None = None,
    ) -> HostTools:
        """The custom tools `interaction` names, loaded (relative files against `base_dir`)."""
        tools = load_custom_tools(interaction.custom_tools(), base_dir)
        return cls(tools, call_timeout=call_timeout, max_output_chars=max_output_chars, state=state)

    def __contains__(self, name: object) -> bool:
        return name in self.tools

    def schemas(self) -> list[dict[str, Any]]:
        """The custom tools' OpenAI-shape schemas."""
        return [tool.schema for tool in self.tools.values()]

    async def call(self, call: ToolCall) -> ToolOutcome:
        """Run one call of a custom tool; the model's mistakes and the tool's failures come back as error
        outcomes, never exceptions."""
        tool = self.tools[call.function_name]
        if call.parse_error is not None:
            message = f"error: could not parse your tool call: {call.parse_error}"
            return ToolOutcome(content=message, error_kind="parse")
        try:
            kwargs = tool.validate(call.arguments)
        except ValidationError as exc:
            message = f"error: {tool.name}: {_argument_problems(exc)}"
            return ToolOutcome(content=message, error_kind="bad_arguments")
        if tool.wants_state:
            kwargs[STATE_PARAMETER] = self.state
        try:
            value = await call_bounded(tool.fn, self.call_timeout, **kwargs)
        except TimeoutError:
            message = f"error: {tool.name} did not finish within {self.call_timeout:g} s"
            return ToolOutcome(content=message, error_kind="execution")
        except Exception as exc:
            message = f"error: {tool.name} failed: {type(exc).__name__}: {exc}"
            return ToolOutcome(content=message, error_kind="execution")
        return ToolOutcome(content=clip(_shown(value), self.max_output_chars))


class EnvironmentResponseError(AgentError):
    """The task's respond hook failed, returned something else than a reply, or ran past its limit."""


class Responder:
    """A task's respond hook with its episode state: `await reply(history)` is the environment's next
    message, or None when the episode is over."""

    def __init__(
        self, reference: str, base_dir: Path | None, *, timeout: float, state: dict[str, Any]
    ) -> None:
        self.reference = reference
        self.hook = load_hook(reference, base_dir, "respond hook")
        self.state = state
        self.timeout = timeout

    @classmethod
    def for_task(
        cls, interaction: Interaction, base_dir: Path | None, *, timeout: float, state: dict[str, Any]
    ) -> Responder | None:
        """The task's responder over the episode's `state`, or None when it has no respond hook."""
        if interaction.respond is None:
            return None
        return cls(interaction.respond, base_dir, timeout=timeout, state=state)

    async def reply(self, history: list[Message]) -> str | None:
        """The hook's reply to the chat so far (None: done); EnvironmentResponseError when it fails."""
        chat = copy.deepcopy(history)
        try:
            value = await call_bounded(self.hook, self.timeout, chat, self.state)
        except TimeoutError:
            raise EnvironmentResponseError(
                f"respond hook {self.reference!r} did not answer within {self.timeout:g} s"
            ) from None
        except Exception as exc:
            raise EnvironmentResponseError(
                f"respond hook {self.reference!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
        if value is None or value is Done or isinstance(value, Done):
            return None
        if not isinstance(value, str):
            raise EnvironmentResponseError(
                f"respond hook {self.reference!r} returned a {type(value).__name__}; expected a str or Done()"
            )
        return value


def _load_hooks(
    interaction: Interaction, base_dir: Path | None, limit: float, max_output_chars: int
) -> tuple[HostTools, Responder | None]:
    state = episode_state(interaction)
    host = HostTools.for_task(
        interaction, base_dir, call_timeout=limit, max_output_chars=max_output_chars, state=state
    )
    return host, Responder.for_task(interaction, base_dir, timeout=limit, state=state)


async def load_task_hooks(
    interaction: Interaction, base_dir: Path | None, *, limit: float, max_output_chars: int
) -> tuple[HostTools, Responder | None]:
    """A run's custom tools and respond hook over one shared episode state, each call bounded by `limit`
    seconds (loaded in a worker thread: loading imports their modules; a task without either loads nothing
    and answers at once, so the loop agent's first model call still starts beside the sandbox's start)."""
    if not interaction.multi_turn:
        return _load_hooks(interaction, base_dir, limit, max_output_chars)
    return await asyncio.to_thread(_load_hooks, interaction, base_dir, limit, max_output_chars)
