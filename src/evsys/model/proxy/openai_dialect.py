"""The OpenAI chat-completions dialect: parse a request into (messages, tools, params), render the response.

Requests are validated with pydantic; message content given as a list of parts is flattened to text (the
`ModelClient` contract is OpenAI messages with string content), `developer` messages become `system` ones.
Responses carry the usual fields plus, when the backend recorded them, vLLM-style token ids
(`prompt_token_ids`, per-choice `token_ids`) if the request asked with `return_token_ids`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evsys.model.base import Completion, Message, SamplingParams, ToolSchema

STREAM_PIECE_CHARS = 24
"""Text and tool-argument deltas are sent in pieces of at most this many characters."""


class OpenAIChatRequest(BaseModel):
    """Body of POST /v1/chat/completions (unknown fields are accepted and ignored)."""

    model_config = ConfigDict(extra="allow")

    model: str = ""
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    temperature: float | None = Field(None, ge=0.0, le=5.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(1, ge=1, le=1, description="Only one choice per request is supported.")
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    logprobs: bool = False
    return_token_ids: bool = False

    def chat(self) -> tuple[list[Message], list[ToolSchema] | None]:
        """The messages (string content) and tools to hand to the model client."""
        return [normalise_message(m) for m in self.messages], self.tools or None

    def sampling(self, max_tokens_cap: int | None) -> SamplingParams:
        """Sampling parameters for the model client, with the proxy's max-token cap applied."""
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingParams(
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            max_tokens=cap_tokens(self.max_completion_tokens or self.max_tokens, max_tokens_cap),
            stop=stop,
            seed=self.seed,
        )


def cap_tokens(requested: int | None, cap: int | None) -> int | None:
    """The smaller of the requested max tokens and the proxy's cap (None means no limit)."""
    if cap is None:
        return requested
    return cap if requested is None else min(requested, cap)


def content_text(content: Any) -> str:
    """Flatten OpenAI/Anthropic content (a string or a list of parts) into text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict):
                parts.append(f"[{part.get('type', 'part')} omitted]")
        return "".join(parts)
    return json.dumps(content, ensure_ascii=False)


def normalise_message(message: dict[str, Any]) -> Message:
    """An OpenAI message with string content and the fields the model client understands."""
    role = message.get("role", "user")
    out: Message = {"role": "system" if role == "developer" else role}
    out["content"] = content_text(message.get("content"))
    if message.get("tool_calls"):
        out["tool_calls"] = message["tool_calls"]
    if message.get("tool_call_id") is not None:
        out["tool_call_id"] = message["tool_call_id"]
    if message.get("name"):
        out["name"] = message["name"]
    return out


def error_body(message: str, kind: str = "invalid_request_error", code: str | None = None) -> dict:
    """OpenAI's error JSON shape."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _usage(completion: Completion) -> dict:
    u = completion.usage
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    }


def _logprobs(completion: Completion) -> dict | None:
    if completion.logprobs is None:
        return None
    ids = completion.completion_token_ids or [None] * len(completion.logprobs)
    return {
        "content": [
            {"token": "", "logprob": lp, "bytes": None, "top_logprobs": [], "id": token_id}
            for token_id, lp in zip(ids, completion.logprobs, strict=False)
        ]
    }


def _tool_calls(completion: Completion) -> list[dict]:
    return [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in completion.tool_calls
    ]


def chat_response(request: OpenAIChatRequest, completion: Completion) -> dict:
    """The non-streaming chat.completion body."""
    message: dict[str, Any] = {"role": "assistant", "content": completion.text or None}
    if completion.tool_calls:
        message["tool_calls"] = _tool_calls(completion)
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": completion.finish_reason}
    choice["logprobs"] = _logprobs(completion) if request.logprobs else None
    body: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model or completion.model,
        "choices": [choice],
        "usage": _usage(completion),
    }
    if request.return_token_ids:
        choice["token_ids"] = completion.completion_token_ids
        body["prompt_token_ids"] = completion.prompt_token_ids
    return body


def pieces(text: str, size: int = STREAM_PIECE_CHARS) -> list[str]:
    """`text` cut into consecutive pieces of at most `size` characters."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_chunks(request: OpenAIChatRequest, completion: Completion) -> Iterator[str]:
    """SSE lines for a finished completion: role, content deltas, tool-call deltas, finish, usage, [DONE]."""
    base = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": request.model or completion.model,
    }

    def chunk(delta: dict, finish: str | None = None, **extra: Any) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, **extra}
        return f"data: {json.dumps({**base, 'choices': [choice]})}\n\n"

    first_extra = {"token_ids": completion.completion_token_ids} if request.return_token_ids else {}
    if request.logprobs:
        first_extra["logprobs"] = _logprobs(completion)
    yield chunk({"role": "assistant", "content": ""}, **first_extra)
    for piece in pieces(completion.text):
        yield chunk({"content": piece})
    for index, call in enumerate(completion.tool_calls):
        head = {"index": index, "id": call.id, "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
        for piece in pieces(call.arguments):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, completion.finish_reason)
    if (request.stream_options or {}).get("include_usage"):
        usage = {**base, "choices": [], "usage": _usage(completion)}
        if request.return_token_ids:
            usage["prompt_token_ids"] = completion.prompt_token_ids
        yield f"data: {json.dumps(usage)}\n\n"
    yield "data: [DONE]\n\n"
