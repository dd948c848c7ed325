"""The OpenAI HTTP wire format, written once: request, response, streaming-chunk and error bodies.

`evsys model serve` (the local engine behind `/v1/chat/completions` and `/v1/completions`) and the recording
proxy's OpenAI dialect both speak it with these pydantic models (`openai_client` and `litellm_client` read
tool calls with evsys.model.tool_calls, without loading these models). Besides OpenAI's fields, responses
carry vLLM's token-id extension when the request asks with `return_token_ids`: `prompt_token_ids` on the
response and `token_ids` on each choice. Optional fields are left out of the JSON when empty, as OpenAI does,
except `logprobs`, which a choice always carries (null when not asked for)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evsys.model.base import Completion, Message, SamplingParams, ToolSchema
from evsys.records import ToolCall, Usage

SSE_DONE = "data: [DONE]\n\n"


def _omit() -> Any:
    return Field(None, exclude_if=lambda value: value is None)


# -- requests ----------------------------------------------------------------------------------------------


class _SamplingRequest(BaseModel):
    """Sampling fields shared by the chat and text completion bodies (unknown fields are accepted)."""

    model_config = ConfigDict(extra="allow")

    model: str = ""
    temperature: float | None = Field(None, ge=0.0, le=5.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=1, description="vLLM/SGLang extension.")
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(1, ge=1, le=1, description="Only one choice per request is supported.")
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    return_token_ids: bool = Field(False, description="vLLM extension: token ids on the response.")
    ignore_eos: bool = Field(False, description="vLLM extension: keep generating past end-of-sequence.")

    def sampling(self, max_tokens_cap: int | None = None) -> SamplingParams:
        """The request's sampling parameters, `max_tokens` capped at `max_tokens_cap` (None: no cap)."""
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingParams(
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            top_k=self.top_k,
            max_tokens=cap_tokens(self.max_completion_tokens or self.max_tokens, max_tokens_cap),
            stop=stop,
            seed=self.seed,
            ignore_eos=self.ignore_eos,
        )

    def include_usage(self) -> bool:
        """Whether a stream ends with a usage chunk (`stream_options.include_usage`)."""
        return bool((self.stream_options or {}).get("include_usage"))


class ChatCompletionRequest(_SamplingRequest):
    """Body of POST /v1/chat/completions."""

    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    logprobs: bool = False

    def chat(self) -> tuple[list[Message], list[ToolSchema] | None]:
        """The messages (string content, `developer` as `system`) and tools to hand to a model client."""
        return [normalise_message(m) for m in self.messages], self.tools or None


class TextCompletionRequest(_SamplingRequest):
    """Body of POST /v1/completions: `prompt` is one text or one list of token ids."""

    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = None

    def prompt_ids(self, encode: Callable[[str], list[int]]) -> list[int]:
        """The prompt as token ids (a text prompt is tokenised with `encode`)."""
        prompt = self.prompt
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]
        if isinstance(prompt, str):
            return encode(prompt)
        ids = [t for t in prompt if isinstance(t, int)]
        if len(ids) == len(prompt):
            return ids
        raise ValueError("prompt must be one string or one list of token ids (batches are not supported)")


def cap_tokens(requested: int | None, cap: int | None) -> int | None:
    """The smaller of the requested max tokens and a cap (None means no limit)."""
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


# -- responses ---------------------------------------------------------------------------------------------


class WireUsage(BaseModel):
    """The `usage` object."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: dict[str, int]

    @classmethod
    def of(cls, usage: Usage) -> WireUsage:
        """Token counts of a completion on the wire."""
        return cls(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            total_tokens=usage.prompt_tokens + usage.completion_tokens,
            prompt_tokens_details={"cached_tokens": usage.cached_tokens},
        )


class WireFunction(BaseModel):
    """A tool call's function (in a stream delta either field may be absent)."""

    name: str | None = _omit()
    arguments: str | None = _omit()


class WireToolCall(BaseModel):
    """A tool call; stream deltas carry `index` and, after the first piece, only argument text."""

    index: int | None = _omit()
    id: str | None = _omit()
    type: Literal["function"] | None = _omit()
    function: WireFunction

    @classmethod
    def of(cls, call: ToolCall, index: int | None = None, arguments: str | None = None) -> WireToolCall:
        """`call` on the wire (`arguments` overrides its argument text, e.g. "" to open a stream)."""
        text = call.arguments_json() if arguments is None else arguments
        function = WireFunction(name=call.function_name, arguments=text)
        return cls(index=index, id=call.tool_call_id, type="function", function=function)


class TokenLogprob(BaseModel):
    """One completion token's logprob (`id` is llama-server's extension; `token` may be unknown: "")."""

    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[Any] = Field(default_factory=list)
    id: int | None


class ChoiceLogprobs(BaseModel):
    """A chat choice's `logprobs`."""

    content: list[TokenLogprob]

    @classmethod
    def of(
        cls,
        ids: Sequence[int] | None,
        logprobs: Sequence[float] | None,
        decode: Callable[[list[int]], str] | None,
        top: Sequence[Sequence[tuple[int, float]]] | None = None,
    ) -> ChoiceLogprobs | None:
        """Entries for each token (texts when `decode` is given), or None when no logprobs were recorded;
        `top` gives each token's most likely alternatives as (id, logprob), filling `top_logprobs`."""
        if logprobs is None:
            return None
        token_ids: Sequence[int | None] = ids if ids is not None else [None] * len(logprobs)
        entries = []
        for index, (token_id, logprob) in enumerate(zip(token_ids, logprobs, strict=False)):
            entry = _token_logprob(token_id, logprob, decode)
            if top is not None and index < len(top):
                entry.top_logprobs = [_token_logprob(i, v, decode) for i, v in top[index]]
            entries.append(entry)
        return cls(content=entries)


def _token_logprob(
    token_id: int | None, logprob: float, decode: Callable[[list[int]], str] | None
) -> TokenLogprob:
    text = decode([token_id]) if decode is not None and token_id is not None else ""
    raw = list(text.encode()) if decode is not None else None
    return TokenLogprob(token=text, logprob=logprob, bytes=raw, id=token_id)


class AssistantMessage(BaseModel):
    """The message of a chat choice."""

    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[WireToolCall] | None = _omit()


class ChatChoice(BaseModel):
    """One choice of a chat completion."""

    index: int = 0
    message: AssistantMessage
    finish_reason: str
    logprobs: ChoiceLogprobs | None = None
    token_ids: list[int] | None = _omit()


class ChatCompletion(BaseModel):
    """The `chat.completion` body."""

    id: str = Field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatChoice]
    usage: WireUsage
    prompt_token_ids: list[int] | None = _omit()

    @classmethod
    def of(
        cls,
        request: ChatCompletionRequest,
        completion: Completion,
        model: str,
        decode: Callable[[list[int]], str] | None = None,
    ) -> ChatCompletion:
        """The response to `request` for `completion`, served as `model` (token texts via `decode`)."""
        calls = [WireToolCall.of(c) for c in completion.tool_calls] or None
        ids = completion.completion_token_ids
        logprobs = None
        if request.logprobs:
            logprobs = ChoiceLogprobs.of(ids, completion.logprobs, decode, completion.top_logprobs)
        choice = ChatChoice(
            message=AssistantMessage(content=completion.text or None, tool_calls=calls),
            finish_reason=completion.finish_reason,
            logprobs=logprobs,
            token_ids=ids if request.return_token_ids else None,
        )
        prompt_ids = completion.prompt_token_ids if request.return_token_ids else None
        return cls(
            model=model, choices=[choice], usage=WireUsage.of(completion.usage), prompt_token_ids=prompt_ids
        )


class Delta(BaseModel):
    """What a stream chunk adds to the message."""

    role: Literal["assistant"] | None = _omit()
    content: str | None = _omit()
    tool_calls: list[WireToolCall] | None = _omit()


class ChunkChoice(BaseModel):
    """One choice of a stream chunk."""

    index: int = 0
    delta: Delta
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = _omit()
    token_ids: list[int] | None = _omit()


class ChatCompletionChunk(BaseModel):
    """A `chat.completion.chunk` (the last one of a stream may carry only `usage`)."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: WireUsage | None = _omit()
    prompt_token_ids: list[int] | None = _omit()


class ChunkStream:
    """Server-sent events of one streamed chat completion (one id, creation time and model throughout)."""

    def __init__(self, model: str) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model

    def event(self, choice: ChunkChoice | None, **fields: Any) -> str:
        """One `data:` line: a chunk with `choice` (None: no choices) and top-level `fields`."""
        choices = [] if choice is None else [choice]
        chunk = ChatCompletionChunk(
            id=self.id, created=self.created, model=self.model, choices=choices, **fields
        )
        return sse(chunk)


class TextLogprobs(BaseModel):
    """A text choice's `logprobs` (legacy completions shape)."""

    tokens: list[str]
    token_logprobs: list[float] | None
    top_logprobs: None = None
    text_offset: None = None


class TextChoice(BaseModel):
    """One choice of a text completion."""

    index: int = 0
    text: str
    finish_reason: str
    logprobs: TextLogprobs | None = None
    token_ids: list[int] | None = _omit()
    prompt_token_ids: list[int] | None = _omit()


class TextCompletion(BaseModel):
    """The `text_completion` body."""

    id: str = Field(default_factory=lambda: f"cmpl-{uuid.uuid4().hex}")
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[TextChoice]
    usage: WireUsage
    prompt_token_ids: list[int] | None = _omit()


class ErrorDetail(BaseModel):
    """What went wrong: `type` is OpenAI's error kind, `code` a machine-readable reason."""

    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """OpenAI's error envelope (the Responses API uses it too)."""

    error: ErrorDetail


def error_body(
    message: str, kind: str = "invalid_request_error", code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """OpenAI's error JSON."""
    return ErrorResponse(error=ErrorDetail(message=message, type=kind, param=param, code=code)).model_dump()


def sse(body: BaseModel) -> str:
    """`body` as one server-sent event line."""
    return f"data: {body.model_dump_json()}\n\n"
