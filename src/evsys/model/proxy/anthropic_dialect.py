"""The Anthropic messages dialect: translate a /v1/messages request into OpenAI-shape messages and back.

Request: `system` (text or text blocks) becomes a system message; `text` blocks become content; an
assistant's `tool_use` blocks become `tool_calls` (input serialised as JSON arguments); a user's
`tool_result` blocks become `tool` messages (placed before the user's text, since they answer the previous
assistant turn); `tools` (`name`, `description`, `input_schema`) become OpenAI function tools. Other
blocks (images, thinking) are replaced by a short placeholder. Response: `text` and `tool_use` content
blocks, `stop_reason`, `usage`; the streaming form is the message_start / content_block_* / message_delta
/ message_stop event sequence."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evsys.model.base import Completion, Message, SamplingParams, ToolSchema
from evsys.model.openai_wire import cap_tokens, content_text
from evsys.model.proxy.openai_dialect import pieces

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


class AnthropicMessage(BaseModel):
    """One message of a /v1/messages request."""

    model_config = ConfigDict(extra="allow")

    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class AnthropicRequest(BaseModel):
    """Body of POST /v1/messages (unknown fields such as `metadata` or `thinking` are ignored)."""

    model_config = ConfigDict(extra="allow")

    model: str = ""
    max_tokens: int = Field(ge=1)
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    temperature: float | None = Field(None, ge=0.0, le=1.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=1)
    stop_sequences: list[str] | None = None
    stream: bool = False

    def chat(self) -> tuple[list[Message], list[ToolSchema] | None]:
        """The chat in OpenAI shape and the tools as OpenAI function tools."""
        messages: list[Message] = []
        if self.system:
            messages.append({"role": "system", "content": content_text(self.system)})
        for message in self.messages:
            messages.extend(_convert(message))
        return messages, [_tool(t) for t in self.tools] if self.tools else None

    def sampling(self, max_tokens_cap: int | None) -> SamplingParams:
        """Sampling parameters for the model client, with the proxy's max-token cap applied."""
        return SamplingParams(
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            top_k=self.top_k,
            max_tokens=cap_tokens(self.max_tokens, max_tokens_cap),
            stop=list(self.stop_sequences or []),
        )


def _tool(tool: dict[str, Any]) -> ToolSchema:
    if not isinstance(tool.get("name"), str):
        raise ValueError(f"tools: every tool needs a 'name' string, got {json.dumps(tool)[:200]}")
    function = {
        "name": tool["name"],
        "description": tool.get("description", ""),
        "parameters": tool.get("input_schema") or {"type": "object", "properties": {}},
    }
    return {"type": "function", "function": function}


def _block_text(block: dict[str, Any]) -> str:
    if block.get("type") == "text":
        return str(block.get("text", ""))
    return f"[{block.get('type', 'block')} omitted]"


def _convert(message: AnthropicMessage) -> list[Message]:
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    if message.role == "assistant":
        text = "".join(_block_text(b) for b in message.content if b.get("type") == "text")
        calls = [
            {
                "id": b.get("id", ""),
                "type": "function",
                "function": {"name": b.get("name", ""), "arguments": json.dumps(b.get("input") or {})},
            }
            for b in message.content
            if b.get("type") == "tool_use"
        ]
        out: Message = {"role": "assistant", "content": text}
        if calls:
            out["tool_calls"] = calls
        return [out]
    results: list[Message] = []
    texts: list[str] = []
    for block in message.content:
        if block.get("type") == "tool_result":
            content = content_text(block.get("content"))
            if block.get("is_error"):
                content = f"[error] {content}"
            results.append({"role": "tool", "tool_call_id": block.get("tool_use_id", ""), "content": content})
        else:
            texts.append(_block_text(block))
    if texts:
        results.append({"role": "user", "content": "".join(texts)})
    return results


def error_body(message: str, kind: str = "invalid_request_error") -> dict:
    """Anthropic's error JSON shape."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def _content_blocks(completion: Completion) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if completion.text:
        blocks.append({"type": "text", "text": completion.text})
    for call in completion.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.tool_call_id, "name": call.function_name, "input": call.arguments}
        )
    return blocks


def _anthropic_usage(completion: Completion) -> dict:
    return {
        "input_tokens": completion.usage.prompt_tokens,
        "output_tokens": completion.usage.completion_tokens,
        "cache_read_input_tokens": completion.usage.cached_tokens,
        "cache_creation_input_tokens": 0,
    }


def message_response(
    request: AnthropicRequest, completion: Completion, message_id: str | None = None
) -> dict:
    """The non-streaming message body."""
    return {
        "id": message_id or f"msg_{uuid.uuid4().hex}",
        "type": "message",
        "role": "assistant",
        "model": request.model or completion.model,
        "content": _content_blocks(completion),
        "stop_reason": STOP_REASONS.get(completion.finish_reason, "end_turn"),
        "stop_sequence": None,
        "usage": _anthropic_usage(completion),
    }


def _event(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


def stream_events(request: AnthropicRequest, completion: Completion) -> Iterator[str]:
    """SSE events for a finished completion, in the order the Anthropic API sends them."""
    full = message_response(request, completion)
    start = {**full, "content": [], "stop_reason": None, "usage": {**full["usage"], "output_tokens": 0}}
    yield _event("message_start", {"message": start})
    for index, block in enumerate(full["content"]):
        if block["type"] == "text":
            yield _event(
                "content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}}
            )
            for piece in pieces(block["text"]):
                yield _event(
                    "content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": piece}}
                )
        else:
            head = {**block, "input": {}}
            yield _event("content_block_start", {"index": index, "content_block": head})
            for piece in pieces(json.dumps(block["input"])):
                delta = {"type": "input_json_delta", "partial_json": piece}
                yield _event("content_block_delta", {"index": index, "delta": delta})
        yield _event("content_block_stop", {"index": index})
    stop = {"stop_reason": full["stop_reason"], "stop_sequence": None}
    yield _event("message_delta", {"delta": stop, "usage": {"output_tokens": full["usage"]["output_tokens"]}})
    yield _event("message_stop", {})
