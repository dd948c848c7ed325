"""The Google Gemini API dialect: `models/<model>:generateContent` and `:streamGenerateContent` requests in
OpenAI-shape messages, and the finished completion back as a `GenerateContentResponse`.

Request: `systemInstruction` becomes a system message; each content (`role` `user` or `model`) becomes one
message: `text` parts concatenated, a model's `functionCall` parts become `tool_calls` (args serialised as
JSON), a user's `functionResponse` parts become `tool` messages (placed before the user's text, since they
answer the previous model turn). A call without an `id` gets one (`call_<content>_<part>`) and the response
naming the same function in the next content is matched to it. Thought parts (`thought: true`) and other
parts (inline data, files, executable code) become short placeholders. `tools[].functionDeclarations`
become OpenAI function tools (`parametersJsonSchema` as is, OpenAPI-style `parameters` with their upper-case
type names lowered); other tools (Google Search, code execution) are not served and are noted on the call.
Response: `candidates[0].content.parts` (`text`, then `functionCall` parts with ids), `finishReason`,
`usageMetadata`; the streaming form (`alt=sse`) is `data: <response>` events with the text in pieces and
the function calls and usage in the last event.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evsys.model.base import Completion, Message, SamplingParams, ToolSchema
from evsys.model.openai_wire import cap_tokens
from evsys.model.proxy.openai_dialect import pieces

FINISH_REASONS = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP"}
DEFAULT_MAX_TOKENS = 8192


class GoogleContent(BaseModel):
    """One entry of `contents` (or the `systemInstruction`)."""

    model_config = ConfigDict(extra="allow")

    role: str = "user"
    parts: list[dict[str, Any]] = Field(default_factory=list)


class GenerationConfig(BaseModel):
    """The sampling fields of `generationConfig` the proxy honours (the rest are ignored)."""

    model_config = ConfigDict(extra="allow")

    temperature: float | None = Field(None, ge=0.0, le=2.0)
    topP: float | None = Field(None, gt=0.0, le=1.0)
    topK: int | None = Field(None, ge=1)
    maxOutputTokens: int | None = Field(None, ge=1)
    stopSequences: list[str] | None = None


class GoogleRequest(BaseModel):
    """Body of POST `.../models/<model>:generateContent` (the model and streaming come from the URL)."""

    model_config = ConfigDict(extra="allow")

    contents: list[GoogleContent] = Field(min_length=1)
    systemInstruction: GoogleContent | str | None = None
    tools: list[dict[str, Any]] | None = None
    generationConfig: GenerationConfig | None = None
    model: str = Field("", description="From the URL path, not the body.")
    stream: bool = Field(False, description="From the URL path, not the body.")
    notes: list[str] = Field(default_factory=list, description="What of the request the model never saw.")

    def chat(self) -> tuple[list[Message], list[ToolSchema] | None]:
        """The chat in OpenAI shape and the function declarations as OpenAI function tools."""
        messages: list[Message] = []
        system = self.systemInstruction
        if isinstance(system, str) and system:
            messages.append({"role": "system", "content": system})
        elif isinstance(system, GoogleContent) and system.parts:
            messages.append({"role": "system", "content": "".join(_part_text(p) for p in system.parts)})
        pending: dict[str, list[str]] = {}  # function name -> ids of its calls not yet answered
        for index, content in enumerate(self.contents):
            messages.extend(_convert(content, index, pending))
        tools = self._tools()
        return messages, tools or None

    def _tools(self) -> list[ToolSchema]:
        tools: list[ToolSchema] = []
        for entry in self.tools or []:
            declarations = entry.get("functionDeclarations") or entry.get("function_declarations")
            if declarations is None:
                self.notes.append(f"tool not served: {sorted(entry)}")
                continue
            tools.extend(_tool(d) for d in declarations)
        return tools

    def sampling(self, max_tokens_cap: int | None) -> SamplingParams:
        """Sampling parameters for the model client, with the proxy's max-token cap applied."""
        config = self.generationConfig or GenerationConfig()
        return SamplingParams(
            temperature=1.0 if config.temperature is None else config.temperature,
            top_p=1.0 if config.topP is None else config.topP,
            top_k=config.topK,
            max_tokens=cap_tokens(config.maxOutputTokens or DEFAULT_MAX_TOKENS, max_tokens_cap),
            stop=list(config.stopSequences or []),
        )


def parse_target(target: str) -> tuple[str, str]:
    """`gemini-2.5-pro:streamGenerateContent` -> (model, method); ValueError when there is no method."""
    model, sep, method = target.rpartition(":")
    if not sep or not model:
        raise ValueError(f"expected <model>:<method> in the path, got {target!r}")
    return model, method


def _lower_types(schema: Any) -> Any:
    """An OpenAPI-style Gemini schema with JSON-schema type names (`OBJECT` -> `object`), recursively."""
    if isinstance(schema, list):
        return [_lower_types(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _lower_types(v) for k, v in schema.items()}
    if isinstance(out.get("type"), str):
        out["type"] = out["type"].lower()
    return out


def _tool(declaration: dict[str, Any]) -> ToolSchema:
    if not isinstance(declaration.get("name"), str):
        raise ValueError(
            f"functionDeclarations: every entry needs a 'name', got {json.dumps(declaration)[:200]}"
        )
    schema = declaration.get("parametersJsonSchema")
    if schema is None:
        schema = _lower_types(declaration.get("parameters") or {"type": "object", "properties": {}})
    function = {
        "name": declaration["name"],
        "description": declaration.get("description", ""),
        "parameters": schema,
    }
    return {"type": "function", "function": function}


def _part_text(part: dict[str, Any]) -> str:
    if part.get("thought"):
        return ""
    if "text" in part:
        return str(part["text"])
    kinds = [k for k in part if k not in ("thoughtSignature", "thought_signature")]
    return f"[{kinds[0] if kinds else 'part'} omitted]" if kinds else ""


def _convert(content: GoogleContent, index: int, pending: dict[str, list[str]]) -> list[Message]:
    """One content as OpenAI messages; `pending` tracks the model's unanswered calls by function name."""
    if content.role == "model":
        calls = []
        for number, part in enumerate(content.parts):
            call = part.get("functionCall")
            if isinstance(call, dict):
                call_id = str(call.get("id") or f"call_{index}_{number}")
                pending.setdefault(str(call.get("name", "")), []).append(call_id)
                arguments = json.dumps(call.get("args") or {})
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.get("name", ""), "arguments": arguments},
                    }
                )
        text = "".join(_part_text(p) for p in content.parts if "functionCall" not in p)
        message: Message = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = calls
        return [message]
    results: list[Message] = []
    texts: list[str] = []
    for part in content.parts:
        response = part.get("functionResponse")
        if isinstance(response, dict):
            name = str(response.get("name", ""))
            waiting = pending.get(name) or []
            call_id = str(response.get("id") or (waiting[0] if waiting else f"call_{name}"))
            if call_id in waiting:
                waiting.remove(call_id)
            results.append({"role": "tool", "tool_call_id": call_id, "content": _response_text(response)})
        else:
            texts.append(_part_text(part))
    if any(texts) or not results:
        results.append({"role": "user", "content": "".join(texts)})
    return results


def _response_text(response: dict[str, Any]) -> str:
    """A function response's payload as the tool message text (`output` / `error` unwrapped when alone)."""
    payload = response.get("response")
    if isinstance(payload, dict) and len(payload) == 1:
        [(key, value)] = payload.items()
        if key in ("output", "content", "result") and isinstance(value, str):
            return value
        if key == "error":
            return f"[error] {value if isinstance(value, str) else json.dumps(value)}"
    return payload if isinstance(payload, str) else json.dumps(payload)


def error_body(status: int, message: str) -> dict:
    """Google's error JSON shape (`{"error": {"code", "message", "status"}}`)."""
    statuses = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED"}
    return {"error": {"code": status, "message": message, "status": statuses.get(status, "INTERNAL")}}


def _usage(completion: Completion) -> dict[str, int]:
    usage = completion.usage
    return {
        "promptTokenCount": usage.prompt_tokens,
        "candidatesTokenCount": usage.completion_tokens,
        "totalTokenCount": usage.prompt_tokens + usage.completion_tokens,
        "cachedContentTokenCount": usage.cached_tokens or 0,
    }


def _call_parts(completion: Completion) -> list[dict[str, Any]]:
    return [
        {"functionCall": {"id": c.tool_call_id, "name": c.function_name, "args": c.arguments}}
        for c in completion.tool_calls
    ]


def _body(request: GoogleRequest, completion: Completion, parts: list[dict[str, Any]], **extra: Any) -> dict:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0, **extra}
    return {
        "candidates": [candidate],
        "modelVersion": request.model or completion.model,
        "responseId": f"evsys-{uuid.uuid4().hex[:16]}",
    }


def generate_response(request: GoogleRequest, completion: Completion) -> dict:
    """The non-streaming `GenerateContentResponse`."""
    parts = ([{"text": completion.text}] if completion.text else []) + _call_parts(completion)
    finish = FINISH_REASONS.get(completion.finish_reason, "STOP")
    body = _body(request, completion, parts or [{"text": ""}], finishReason=finish)
    return {**body, "usageMetadata": _usage(completion)}


def stream_events(request: GoogleRequest, completion: Completion) -> Iterator[str]:
    """`alt=sse` events for a finished completion: text pieces, then the calls, finish reason and usage."""
    texts = pieces(completion.text)
    for piece in texts[:-1]:
        yield _sse(_body(request, completion, [{"text": piece}]))
    yield _sse(generate_response(request, completion) | {"candidates": [_last_candidate(completion, texts)]})


def _last_candidate(completion: Completion, texts: list[str]) -> dict[str, Any]:
    parts = ([{"text": texts[-1]}] if texts else []) + _call_parts(completion)
    finish = FINISH_REASONS.get(completion.finish_reason, "STOP")
    return {
        "content": {"role": "model", "parts": parts or [{"text": ""}]},
        "index": 0,
        "finishReason": finish,
    }


def _sse(body: dict) -> str:
    return f"data: {json.dumps(body)}\r\n\r\n"


def count_tokens_response(request: GoogleRequest) -> dict:
    """An estimate for `:countTokens` (about four characters a token; the proxy does not tokenize here)."""
    messages, tools = request.chat()
    size = len(json.dumps(messages)) + len(json.dumps(tools or []))
    return {"totalTokens": max(1, size // 4)}
