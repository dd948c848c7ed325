"""A scripted `ModelClient`: answers with the replies a test wrote, in order, and keeps every request, so
tests of agents, trials and jobs need no model engine.

A reply is a `Completion`, a `str` (the assistant's text), or a function of the request (`ScriptedRequest`)
returning either, for answers that depend on what was asked; `tool_call(name, **arguments)` makes a
completion that calls a tool. Past the last reply the client raises `ModelError` (or, with `repeat_last`,
gives the last one again).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evsys.model.base import Completion, Message, SamplingParams, ToolSchema
from evsys.model.errors import ModelError
from evsys.records import ToolCall

__all__ = ["Reply", "ScriptedModelClient", "ScriptedRequest", "tool_call"]


@dataclass
class ScriptedRequest:
    """One request the client was sent."""

    messages: list[Message]
    tools: list[ToolSchema] | None
    params: SamplingParams | None


Reply = Completion | str | Callable[[ScriptedRequest], "Completion | str"]

_CALL_IDS = itertools.count(1)


def tool_call(name: str, **arguments: Any) -> Completion:
    """A completion that calls the tool `name` with `arguments`."""
    raw = json.dumps(arguments)
    call = ToolCall(
        tool_call_id=f"call-{next(_CALL_IDS)}", function_name=name, arguments=arguments, raw_arguments=raw
    )
    return Completion(text="", tool_calls=[call], finish_reason="tool_calls")


class ScriptedModelClient:
    """A `ModelClient` that answers each request with the next scripted reply (see the module doc)."""

    def __init__(self, *replies: Reply, model: str = "scripted", repeat_last: bool = False) -> None:
        self.model = model
        self.replies = list(replies)
        self.repeat_last = repeat_last
        self.requests: list[ScriptedRequest] = []
        self.closed = False

    async def complete(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSchema] | None = None,
        params: SamplingParams | None = None,
    ) -> Completion:
        """The next reply (a copy of the chat is kept in `requests`)."""
        request = ScriptedRequest(messages=[dict(m) for m in messages], tools=tools, params=params)
        self.requests.append(request)
        await asyncio.sleep(0)  # a real client yields to the loop
        if not self.replies:
            raise ModelError(f"the scripted model has no reply left for request {len(self.requests)}")
        reply = self.replies[0] if self.repeat_last and len(self.replies) == 1 else self.replies.pop(0)
        answer = reply(request) if callable(reply) else reply
        completion = Completion(text=answer) if isinstance(answer, str) else answer
        return completion.model_copy(update={"model": completion.model or self.model})

    async def aclose(self) -> None:
        """Mark the client closed (tests check that its owner closed it)."""
        self.closed = True
