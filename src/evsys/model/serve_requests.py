"""The request bodies `evsys model serve` takes: the shared OpenAI wire requests, with every parameter the
local engine does not honour refused (a 400 naming it in `error.param`) instead of silently ignored.

Accepted: the sampling fields of `evsys.model.openai_wire`, `n` up to `MAX_CHOICES` (not with `stream`; each
choice samples on its own, seeded `seed + i` when a seed is given), `user` (it only names the caller),
`parallel_tool_calls`, `tool_choice` "auto" or "none" ("none" hides the tools from the model),
`response_format` {"type": "text"}, zero penalties, an empty `logit_bias`, and `top_logprobs` up to 20 with
`logprobs: true` on non-streamed chat completions (the raw-distribution alternatives of each token). Refused:
other values of those fields, and any field not listed (the proxy keeps accepting unknown fields: harnesses
send many).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from evsys.model.base import Message, SamplingParams, ToolSchema
from evsys.model.openai_wire import ChatCompletionRequest, TextCompletionRequest

MAX_CHOICES = 16
MAX_TOP_LOGPROBS = 20
N_FIELD = Field(1, ge=1, le=MAX_CHOICES, description="Choices to sample for the prompt (GRPO-style groups).")


def _refuse(name: str, why: str) -> ValueError:
    return ValueError(f"{name} is not supported by evsys model serve: {why}")


def _stream_with_n(stream: bool, info: ValidationInfo) -> bool:
    if stream and info.data.get("n", 1) > 1:
        raise _refuse("stream", "with n > 1 (several choices are served without stream only)")
    return stream


class _Refusing(BaseModel):
    """Fields both endpoints accept only in the form the engine honours."""

    user: str | None = Field(None, description="Accepted: it only names the caller.")
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None

    @field_validator("frequency_penalty", "presence_penalty")
    @classmethod
    def _no_penalty(cls, value: float, info: ValidationInfo) -> float:
        if value != 0.0:
            assert info.field_name is not None  # a field validator always knows its field
            raise _refuse(info.field_name, "only 0 is accepted")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _no_bias(cls, value: dict | None) -> dict | None:
        if value:
            raise _refuse("logit_bias", "only an empty map is accepted")
        return value


class ServeChatRequest(_Refusing, ChatCompletionRequest):
    """Body of `evsys model serve`'s POST /v1/chat/completions."""

    model_config = ConfigDict(extra="forbid")

    n: int = N_FIELD
    top_logprobs: int | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None

    @field_validator("top_logprobs")
    @classmethod
    def _top_logprobs(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value and not 0 < value <= MAX_TOP_LOGPROBS:
            raise _refuse("top_logprobs", f"{value}; 0 to {MAX_TOP_LOGPROBS} are")
        if value and info.data.get("stream"):
            raise _refuse("top_logprobs", "with stream (it is served on non-streamed chat completions)")
        if value and not info.data.get("logprobs"):
            raise ValueError("top_logprobs needs logprobs: true")
        return value

    def sampling(self, max_tokens_cap: int | None = None) -> SamplingParams:
        """The request's sampling parameters, with the alternatives `top_logprobs` asks for."""
        params = super().sampling(max_tokens_cap)
        return params.model_copy(update={"top_logprobs": self.top_logprobs or 0})

    @field_validator("tool_choice")
    @classmethod
    def _auto_or_none(cls, value: str | dict | None) -> str | dict | None:
        if value not in (None, "auto", "none"):
            raise _refuse("tool_choice", f"{value!r}; only 'auto' and 'none' are")
        return value

    @field_validator("response_format")
    @classmethod
    def _text_only(cls, value: dict | None) -> dict | None:
        if value not in (None, {"type": "text"}):
            raise _refuse("response_format", "only {'type': 'text'} is")
        return value

    _n_without_stream = field_validator("stream")(_stream_with_n)

    def chat(self) -> tuple[list[Message], list[ToolSchema] | None]:
        """The messages and the tools the model sees (none with tool_choice='none')."""
        messages, tools = super().chat()
        return messages, None if self.tool_choice == "none" else tools


class ServeTextRequest(_Refusing, TextCompletionRequest):
    """Body of `evsys model serve`'s POST /v1/completions."""

    model_config = ConfigDict(extra="forbid")

    n: int = N_FIELD

    _n_without_stream = field_validator("stream")(_stream_with_n)


def validation_error_text(error: Mapping[str, Any]) -> str:
    """One pydantic error of a request body as `field: what is wrong` (refusals without pydantic's prefix)."""
    where = ".".join(map(str, error["loc"][1:]))
    if error["type"] == "extra_forbidden":
        return f"{where}: not supported by evsys model serve"
    return f"{where}: {error['msg'].removeprefix('Value error, ')}"


def validation_error_param(errors: Sequence[Any]) -> str | None:
    """The field the first error is about (OpenAI's `error.param`)."""
    return ".".join(map(str, errors[0]["loc"][1:])) or None if errors else None
