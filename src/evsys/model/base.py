"""The `ModelClient` protocol every model backend implements, and the records that cross it.

A client turns a chat (OpenAI-style message dicts) plus optional tool schemas into a `Completion`: the
assistant's text and tool calls, and, when the backend can tell, the exact prompt and completion token ids and
the sampling logprobs of each completion token. Those token-level fields are what RL training needs; backends
that cannot provide them leave them `None` rather than guessing."""

from __future__ import annotations

import contextlib
from typing import Any, Literal, Protocol, get_args, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from evsys.records import ToolCall, Usage

Message = dict[str, Any]
"""One chat message in OpenAI shape: {"role", "content", "tool_calls", "tool_call_id"}."""

ToolSchema = dict[str, Any]
"""One tool in OpenAI shape: {"type": "function", "function": {"name", "description", "parameters"}}."""

FinishReason = Literal["stop", "length", "tool_calls"]
FINISH_REASONS: tuple[FinishReason, ...] = get_args(FinishReason)


class SamplingParams(BaseModel):
    """How to sample. `temperature=0` is greedy; a `seed` makes sampling reproducible on the local engine."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(1.0, ge=0.0, le=5.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=1, description="Keep only the k most likely tokens (local engine).")
    max_tokens: int | None = Field(
        None, ge=1, description="None: whatever fits in the model's context window."
    )
    stop: list[str] = Field(default_factory=list, description="Stop strings; they are not part of `text`.")
    seed: int | None = None
    logprobs: bool = True
    top_logprobs: int = Field(
        0, ge=0, le=20, description="Also keep the k most likely tokens at each step (local engine)."
    )
    ignore_eos: bool = Field(
        False, description="Keep generating past end-of-sequence (benchmarks; local only)."
    )
    timeout_s: float | None = Field(None, gt=0, description="Per-request timeout (remote backends).")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="Passed through to remote servers.")


class Completion(BaseModel):
    """One model response, with token-level detail where the backend provides it."""

    text: str = Field(description="Assistant content, with tool-call markup removed.")
    raw_text: str | None = Field(None, description="Exact decoding of completion_token_ids, when known.")
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: FinishReason = "stop"
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = Field(None, description="Sampling logprob of each completion token.")
    top_logprobs: list[list[tuple[int, float]]] | None = Field(
        None, description="Per completion token, the (id, logprob) of the most likely tokens, best first."
    )
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    weights_version: int | None = Field(
        None, description="Version of the weights that sampled it (the local engine counts its updates)."
    )
    model: str = ""
    latency_s: float = 0.0

    def to_message(self) -> Message:
        """The assistant message to append to the chat history (OpenAI shape)."""
        message: Message = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.tool_call_id,
                    "type": "function",
                    "function": {"name": c.function_name, "arguments": c.arguments_json()},
                }
                for c in self.tool_calls
            ]
        return message


@runtime_checkable
class ChatCompleter(Protocol):
    """Anything with `complete`, the one call of a `ModelClient` (a client a caller lends to a job, which
    never closes it, needs no more). Implementations must not block the event loop."""

    async def complete(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSchema] | None = None,
        params: SamplingParams | None = None,
    ) -> Completion:
        """Complete `messages` (optionally offering `tools`) and return the model's response."""
        ...


@runtime_checkable
class ModelClient(ChatCompleter, Protocol):
    """Anything that can complete a chat, named by `model`, and be closed. Implementations must not block the
    event loop."""

    model: str

    async def aclose(self) -> None:
        """Release connections, worker threads and model weights."""
        ...


async def close_model_client(client: ModelClient | None) -> None:
    """Close `client` (when there is one), never raising: a client that fails to close is left to the
    garbage collector, and whoever closes it goes on closing the rest."""
    if client is not None:
        with contextlib.suppress(Exception):
            await client.aclose()
