"""The OpenAI Responses dialect (`POST /v1/responses`, what Codex CLI speaks): request in, Response out.

Request: `instructions` becomes the first system message; `input` is a string (one user message) or a list of
items: `message` items (roles user/system/developer/assistant, content as text or `input_text` / `output_text`
parts) become chat messages (`developer` -> `system`), `function_call` items become `tool_calls` of the
assistant message they follow, `function_call_output` items become `tool` messages. Function tools (also
those nested in a `namespace` tool, exposed as `<namespace>__<name>`) become OpenAI function tools; other tool
types (web_search, custom, local_shell, ...) and input items the chat cannot carry (reasoning, ...) are
dropped and recorded as `notes` on the call. `previous_response_id` is refused: the proxy stores no
responses, clients send the whole conversation (Codex does). Response: the Response object with `message` /
`function_call` output items and `usage`; streaming sends the `response.created` ... `response.completed`
event sequence.

A reply cut by the length limit is `incomplete` only when the client's own `max_output_tokens` was the limit;
a cut made by the proxy's `max_tokens_cap` (an operator policy, e.g. tiny test models) is reported as
completed.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from evsys.model.base import Completion, Message, SamplingParams, ToolSchema
from evsys.model.openai_wire import cap_tokens
from evsys.model.proxy.openai_dialect import pieces

NAMESPACE_SEPARATOR = "__"
_TEXT_PARTS = {"input_text", "output_text", "text", "summary_text", "reasoning_text"}


class ResponsesRequest(BaseModel):
    """Body of POST /v1/responses (unknown fields such as `metadata` or `client_metadata` are ignored)."""

    model_config = ConfigDict(extra="allow")

    model: str = ""
    input: str | list[dict[str, Any]]
    instructions: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stream: bool = False
    parallel_tool_calls: bool | None = None
    reasoning: dict[str, Any] | None = None
    store: bool | None = None
    include: list[str] | None = None
    previous_response_id: str | None = None

    _notes: list[str] = PrivateAttr(default_factory=list)
    _namespaced: dict[str, tuple[str, str]] = PrivateAttr(default_factory=dict)

    @property
    def notes(self) -> list[str]:
        """What of the request the chat could not carry (dropped tools and items), filled by `chat()`."""
        return self._notes

    def chat(self) -> tuple[list[Message], list[ToolSchema] | None]:
        """The chat in OpenAI shape and the function tools; ValueError naming the field on bad input."""
        if self.previous_response_id:
            raise ValueError(
                "previous_response_id: not supported, the evsys proxy stores no responses; "
                "send the whole conversation in `input`"
            )
        self._notes, self._namespaced = [], {}
        tools = self._tools()
        messages: list[Message] = []
        if self.instructions:
            messages.append({"role": "system", "content": _parts_text(self.instructions, "instructions")})
        if isinstance(self.input, str):
            messages.append({"role": "user", "content": self.input})
        else:
            for index, item in enumerate(self.input):
                self._add_item(messages, item, f"input[{index}]")
        if not messages:
            raise ValueError("input: the request has no messages")
        return messages, tools

    def sampling(self, max_tokens_cap: int | None) -> SamplingParams:
        """Sampling parameters for the model client, with the proxy's max-token cap applied."""
        return SamplingParams(
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            max_tokens=cap_tokens(self.max_output_tokens, max_tokens_cap),
        )

    def public_name(self, flat_name: str) -> tuple[str, str | None]:
        """(name, namespace) of a tool the model called under its flattened chat name."""
        if flat_name in self._namespaced:
            namespace, name = self._namespaced[flat_name]
            return name, namespace
        return flat_name, None

    def _tools(self) -> list[ToolSchema] | None:
        if self.tool_choice == "none":
            return None
        tools: list[ToolSchema] = []
        for index, tool in enumerate(self.tools or []):
            where = f"tools[{index}]"
            if tool.get("type") == "function":
                tools.append(_function_tool(tool, where))
            elif tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
                tools.extend(self._namespace_tools(tool, where))
            else:
                self._notes.append(f"{where}: tool type {tool.get('type')!r} is not supported, ignored")
        chosen = self.tool_choice
        if isinstance(chosen, dict) and chosen.get("type") == "function" and chosen.get("name"):
            tools = [t for t in tools if t["function"]["name"] == chosen["name"]]
            self._notes.append(f"tool_choice: only {chosen['name']!r} was offered (a call is not forced)")
        elif chosen == "required":
            self._notes.append("tool_choice: 'required' cannot be enforced, treated as 'auto'")
        return tools or None

    def _namespace_tools(self, tool: dict[str, Any], where: str) -> list[ToolSchema]:
        namespace = str(tool.get("name", ""))
        out = []
        for index, inner in enumerate(tool["tools"]):
            if not isinstance(inner, dict) or inner.get("type", "function") != "function":
                self._notes.append(f"{where}.tools[{index}]: only function tools are supported, ignored")
                continue
            schema = _function_tool(inner, f"{where}.tools[{index}]")
            flat = f"{namespace}{NAMESPACE_SEPARATOR}{schema['function']['name']}"
            self._namespaced[flat] = (namespace, schema["function"]["name"])
            schema["function"]["name"] = flat
            out.append(schema)
        return out

    def _flat_name(self, name: str, namespace: Any) -> str:
        return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name

    def _add_item(self, messages: list[Message], item: Any, where: str) -> None:
        if not isinstance(item, dict):
            raise ValueError(f"{where}: an input item must be an object, got {type(item).__name__}")
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            messages.append(_message(item, where))
        elif kind in ("function_call", "custom_tool_call"):
            _append_call(messages, self._call(item, kind, where))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = _required(item, "call_id", where)
            output = _parts_text(item.get("output", ""), f"{where}.output")
            messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        else:
            self._notes.append(f"{where}: input item type {kind!r} cannot be given to a chat model, skipped")

    def _call(self, item: dict[str, Any], kind: str, where: str) -> dict[str, Any]:
        call_id = _required(item, "call_id", where)
        name = self._flat_name(_required(item, "name", where), item.get("namespace"))
        if kind == "custom_tool_call":
            arguments = json.dumps({"input": str(item.get("input", ""))})
        else:
            arguments = item.get("arguments", "")
            if not isinstance(arguments, str):
                raise ValueError(f"{where}.arguments: must be a JSON string")
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _required(item: dict[str, Any], field: str, where: str) -> str:
    value = item.get(field)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}.{field}: a {item.get('type', 'message')} item needs a non-empty string")
    return value


def _function_tool(tool: dict[str, Any], where: str) -> ToolSchema:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}.name: a function tool needs a name")
    function = {
        "name": name,
        "description": tool.get("description") or "",
        "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
    }
    return {"type": "function", "function": function}


def _parts_text(content: Any, where: str) -> str:
    """Text of Responses content: a string, or a list of parts (text parts kept, others a placeholder)."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise ValueError(f"{where}: content must be a string or a list of parts")
    texts = []
    for index, part in enumerate(content):
        if not isinstance(part, dict):
            raise ValueError(f"{where}[{index}]: a content part must be an object")
        kind = part.get("type")
        if kind in _TEXT_PARTS or (kind is None and isinstance(part.get("text"), str)):
            texts.append(str(part.get("text", "")))
        elif kind == "refusal":
            texts.append(str(part.get("refusal", "")))
        elif kind == "message":  # instructions given as message items
            texts.append(_parts_text(part.get("content"), f"{where}[{index}].content"))
        else:
            texts.append(f"[{kind or 'part'} omitted]")
    return "".join(texts)


def _message(item: dict[str, Any], where: str) -> Message:
    role = item.get("role")
    if role not in ("user", "system", "developer", "assistant"):
        raise ValueError(f"{where}.role: must be user, system, developer or assistant, got {role!r}")
    content = _parts_text(item.get("content"), f"{where}.content")
    return {"role": "system" if role == "developer" else role, "content": content}


def _append_call(messages: list[Message], call: dict[str, Any]) -> None:
    """Attach a tool call to the assistant message it follows (one chat turn), or start one."""
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})


def _responses_usage(completion: Completion) -> dict:
    u = completion.usage
    return {
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    }


def _logprobs(request: ResponsesRequest, completion: Completion) -> list[dict] | None:
    if "message.output_text.logprobs" not in (request.include or []) or completion.logprobs is None:
        return None
    return [{"token": "", "logprob": lp, "bytes": [], "top_logprobs": []} for lp in completion.logprobs]


def output_items(request: ResponsesRequest, completion: Completion) -> list[dict[str, Any]]:
    """The response's output: a `message` item for the text, one `function_call` item per tool call."""
    items: list[dict[str, Any]] = []
    if completion.text or not completion.tool_calls:
        part: dict[str, Any] = {"type": "output_text", "text": completion.text, "annotations": []}
        logprobs = _logprobs(request, completion)
        if logprobs is not None:
            part["logprobs"] = logprobs
        items.append(
            {
                "id": f"msg_{uuid.uuid4().hex}",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
        )
    for call in completion.tool_calls:
        name, namespace = request.public_name(call.function_name)
        item = {
            "id": f"fc_{uuid.uuid4().hex}",
            "type": "function_call",
            "status": "completed",
            "call_id": call.tool_call_id,
            "name": name,
            "arguments": call.arguments_json(),
        }
        if namespace:
            item["namespace"] = namespace
        items.append(item)
    return items


def is_incomplete(request: ResponsesRequest, completion: Completion, max_tokens_cap: int | None) -> bool:
    """Whether the client's own `max_output_tokens` cut the reply (see the module docstring)."""
    asked = request.max_output_tokens
    own_limit = asked is not None and (max_tokens_cap is None or asked <= max_tokens_cap)
    return completion.finish_reason == "length" and own_limit


def response_object(
    request: ResponsesRequest,
    completion: Completion,
    *,
    max_tokens_cap: int | None = None,
    response_id: str | None = None,
    output: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The non-streaming Response object (also the payload of `response.completed`)."""
    incomplete = is_incomplete(request, completion, max_tokens_cap)
    return {
        "id": response_id or f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if incomplete else "completed",
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "model": request.model or completion.model,
        "output": output if output is not None else output_items(request, completion),
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "previous_response_id": None,
        "reasoning": request.reasoning,
        "store": False,
        "temperature": request.temperature,
        "tool_choice": request.tool_choice or "auto",
        "tools": request.tools or [],
        "top_p": request.top_p,
        "usage": _responses_usage(completion),
    }


def stream_events(
    request: ResponsesRequest, completion: Completion, *, max_tokens_cap: int | None = None
) -> Iterator[str]:
    """SSE events for a finished completion, in the order the Responses API streams them."""
    final = response_object(request, completion, max_tokens_cap=max_tokens_cap)
    sequence = iter(range(1 << 62))

    def event(kind: str, **data: Any) -> str:
        body = {"type": kind, "sequence_number": next(sequence), **data}
        return f"event: {kind}\ndata: {json.dumps(body)}\n\n"

    start = {**final, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    yield event("response.created", response=start)
    yield event("response.in_progress", response=start)
    for index, item in enumerate(final["output"]):
        if item["type"] == "message":
            yield from _message_events(event, index, item)
        else:
            yield from _call_events(event, index, item)
    yield event(
        "response.incomplete" if final["status"] == "incomplete" else "response.completed", response=final
    )


def _message_events(event: Any, index: int, item: dict[str, Any]) -> Iterator[str]:
    part = item["content"][0]
    where = {"item_id": item["id"], "output_index": index}
    yield event(
        "response.output_item.added",
        output_index=index,
        item={**item, "status": "in_progress", "content": []},
    )
    empty = {"type": "output_text", "text": "", "annotations": []}
    yield event("response.content_part.added", **where, content_index=0, part=empty)
    for piece in pieces(part["text"]):
        yield event("response.output_text.delta", **where, content_index=0, delta=piece, logprobs=[])
    yield event(
        "response.output_text.done",
        **where,
        content_index=0,
        text=part["text"],
        logprobs=part.get("logprobs", []),
    )
    yield event("response.content_part.done", **where, content_index=0, part=part)
    yield event("response.output_item.done", output_index=index, item=item)


def _call_events(event: Any, index: int, item: dict[str, Any]) -> Iterator[str]:
    where = {"item_id": item["id"], "output_index": index}
    yield event(
        "response.output_item.added",
        output_index=index,
        item={**item, "status": "in_progress", "arguments": ""},
    )
    for piece in pieces(item["arguments"]):
        yield event("response.function_call_arguments.delta", **where, delta=piece)
    yield event(
        "response.function_call_arguments.done", **where, name=item["name"], arguments=item["arguments"]
    )
    yield event("response.output_item.done", output_index=index, item=item)
