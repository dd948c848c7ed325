"""The OpenAI chat-completions dialect of the proxy: the request as `evsys.model.openai_wire` reads it, the
response and its stream built from the finished completion with the same wire models.

Message content given as a list of parts is flattened to text (the `ModelClient` contract is OpenAI messages
with string content), `developer` messages become `system` ones. Responses carry the usual fields plus, when
the backend recorded them, vLLM-style token ids (`prompt_token_ids`, per-choice `token_ids`) if the request
asked with `return_token_ids`.
"""

from __future__ import annotations

from collections.abc import Iterator

from evsys.model.base import Completion, SamplingParams
from evsys.model.openai_wire import (
    SSE_DONE,
    ChatCompletion,
    ChatCompletionRequest,
    ChoiceLogprobs,
    ChunkChoice,
    ChunkStream,
    Delta,
    WireFunction,
    WireToolCall,
    WireUsage,
)

STREAM_PIECE_CHARS = 24
"""Text and tool-argument deltas are sent in pieces of at most this many characters."""


class OpenAIChatRequest(ChatCompletionRequest):
    """A chat-completions request as the proxy takes it: `ignore_eos` is not honoured (a harness must not keep
    the model generating past its end of turn)."""

    def sampling(self, max_tokens_cap: int | None = None) -> SamplingParams:
        """Sampling parameters for the model client, with the proxy's max-token cap applied."""
        return super().sampling(max_tokens_cap).model_copy(update={"ignore_eos": False})


def chat_response(request: OpenAIChatRequest, completion: Completion) -> dict:
    """The non-streaming chat.completion body."""
    return ChatCompletion.of(request, completion, request.model or completion.model).model_dump()


def pieces(text: str, size: int = STREAM_PIECE_CHARS) -> list[str]:
    """`text` cut into consecutive pieces of at most `size` characters."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_chunks(request: OpenAIChatRequest, completion: Completion) -> Iterator[str]:
    """SSE lines for a finished completion: role, content deltas, tool-call deltas, finish, usage, [DONE]."""
    stream = ChunkStream(request.model or completion.model)
    first = ChunkChoice(delta=Delta(role="assistant", content=""))
    if request.return_token_ids:
        first.token_ids = completion.completion_token_ids
    if request.logprobs:
        first.logprobs = ChoiceLogprobs.of(completion.completion_token_ids, completion.logprobs, None)
    yield stream.event(first)
    for piece in pieces(completion.text):
        yield stream.event(ChunkChoice(delta=Delta(content=piece)))
    for index, call in enumerate(completion.tool_calls):
        yield stream.event(ChunkChoice(delta=Delta(tool_calls=[WireToolCall.of(call, index, arguments="")])))
        for piece in pieces(call.arguments_json()):
            delta = WireToolCall(index=index, function=WireFunction(arguments=piece))
            yield stream.event(ChunkChoice(delta=Delta(tool_calls=[delta])))
    yield stream.event(ChunkChoice(delta=Delta(), finish_reason=completion.finish_reason))
    if request.include_usage():
        prompt_ids = completion.prompt_token_ids if request.return_token_ids else None
        yield stream.event(None, usage=WireUsage.of(completion.usage), prompt_token_ids=prompt_ids)
    yield SSE_DONE
