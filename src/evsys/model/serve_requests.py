"""The request bodies `evsys model serve` takes: the shared OpenAI wire requests, with every parameter the
local engine does not honour refused (a 400 naming it in `error.param`) instead of silently ignored.

Accepted: the sampling fields of `evsys.model.openai_wire`, `n` up to `MAX_CHOICES` (not with `stream`; each
choice samples on its own, seeded `seed + i` when a seed is given), `user` (it only names the caller),
`parallel_tool_calls`, `tool_choice` "auto", "none" ("none" hides the tools from the model), "required" or
{"type": "function", "function": {"name": ...}} (the completion is one call of an offered tool, by constrained
decoding), `response_format` {"type": "text"}, {"type": "json_object"} or {"type": "json_schema",
"json_schema": {"schema": {...}}} (the completion is JSON, valid against the schema), zero penalties, an empty
`logit_bias`, and `top_logprobs` up to 20 with `logprobs: true` on non-streamed chat completions (the
raw-distribution alternatives of each token). Refused: other values of those fields, a forced tool call
together with a JSON response format, and any field not listed (the proxy keeps accepting unknown fields:
harnesses send many).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from evsys.model.base import Message, SamplingParams, ToolSchema
from evsys.model.local.constrain import OutputConstraint
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
    def _known_tool_choice(cls, value: str | dict | None) -> str | dict | None:
        if value in (None, "auto", "none", "required") or _forced_tool_name(value):
            return value
        raise _refuse(
            "tool_choice",
            f"{value!r}; 'auto', 'none', 'required' and "
            "{'type': 'function', 'function': {'name': ...}} are",
        )

    @field_validator("response_format")
    @classmethod
    def _known_format(cls, value: dict | None) -> dict | None:
        if value is None or value in ({"type": "text"}, {"type": "json_object"}):
            return value
        if value.get("type") == "json_schema":
            if not isinstance((value.get("json_schema") or {}).get("schema"), dict):
                raise ValueError("response_format json_schema needs json_schema.schema (a JSON schema)")
            return value
        raise _refuse("response_format", "only the types 'text', 'json_object' and 'json_schema' are")

    @model_validator(mode="after")
    def _constraint_is_possible(self) -> ServeChatRequest:
        self.constraint()  # raises ValueError (a 400) for a tool choice or format that cannot be honoured
        return self

    def constraint(self) -> OutputConstraint | None:
        """What constrained decoding must enforce for this request: a forced tool call, JSON, or nothing."""
        forced = self.tool_choice == "required" or _forced_tool_name(self.tool_choice)
        json_format = self.response_format is not None and self.response_format["type"] != "text"
        if forced and json_format:
            raise _refuse("tool_choice", "a forced tool call together with a JSON response_format")
        if forced:
            if not self.tools:
                raise ValueError(f"tool_choice {self.tool_choice!r} needs tools")
            return OutputConstraint.for_tool_call(self.tools, _forced_tool_name(self.tool_choice))
        if json_format:
            assert self.response_format is not None
            schema = (self.response_format.get("json_schema") or {}).get("schema")
            return OutputConstraint.for_json(schema)
        return None

    _n_without_stream = field_validator("stream")(_stream_with_n)

    def chat(self) -> tuple[list[Message], list[ToolSchema] | None]:
        """The messages and the tools the model sees (none with tool_choice='none')."""
        messages, tools = super().chat()
        return messages, None if self.tool_choice == "none" else tools


def _forced_tool_name(choice: str | dict | None) -> str | None:
    """The tool a {"type": "function", "function": {"name": ...}} tool_choice forces, else None."""
    if not isinstance(choice, dict) or choice.get("type") != "function":
        return None
    name = (choice.get("function") or {}).get("name")
    return name if isinstance(name, str) and name else None


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
