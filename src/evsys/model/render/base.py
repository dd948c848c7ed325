"""The renderer contract: a chat (+ tools) becomes prompt token ids; completion ids become text + tool calls.

Every token-in/token-out backend needs both halves with the same tokenizer and the same conventions: the
in-process engine, and any backend that samples from ids (Tinker, SGLang `/generate`). A `Renderer` owns them:

- `render(messages, tools) -> list[int]`: the prompt, ending with the assistant generation prompt, exactly
  as the model will see it (no special tokens added on top);
- `parse(completion_ids, stop) -> ParsedCompletion`: the sampled ids back into the raw text, the visible text
  (cut at the first stop string) and, from it, the assistant content and its tool calls. Malformed tool calls
  are kept with a `parse_error`, never raised.

A renderer is synchronous and pure (no I/O after construction); callers run it off the event loop."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from pydantic import BaseModel, Field

from evsys.model.base import Message, ToolSchema
from evsys.records import ToolCall


class ParsedCompletion(BaseModel):
    """What a renderer reads out of completion token ids."""

    raw_text: str = Field(description="Exact decoding of the ids, a final end-of-turn token left out.")
    visible_text: str = Field(description="raw_text cut before the first stop string.")
    text: str = Field(description="visible_text with the tool-call markup removed: the assistant content.")
    tool_calls: list[ToolCall] = Field(default_factory=list)


def find_stop(text: str, stops: Sequence[str]) -> int | None:
    """Index of the earliest stop string in `text`, or None."""
    positions = [text.find(s) for s in stops if s and s in text]
    return min(positions) if positions else None


class Renderer(ABC):
    """Messages + tools -> prompt ids, completion ids -> `ParsedCompletion`, for one tokenizer."""

    end_token_ids: frozenset[int] = frozenset()
    """Tokens that end the assistant's turn (end-of-sequence, end-of-turn); they are not part of the text."""

    tool_call_markers: tuple[str, ...] = ()
    """Strings that open tool-call markup: a streaming server holds back text that may be one's start."""

    @abstractmethod
    def render(self, messages: list[Message], tools: list[ToolSchema] | None = None) -> list[int]:
        """The prompt ids for `messages` (and the `tools` offered), ending with the generation prompt."""

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, with no special tokens added."""

    @abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """`ids` as text, exactly: special tokens kept, no clean-up of spaces."""

    @abstractmethod
    def split_tool_calls(self, text: str) -> tuple[str, list[ToolCall]]:
        """`text` split into the assistant content and the tool calls written in it."""

    def parse(self, completion_ids: Sequence[int], stop: Sequence[str] = ()) -> ParsedCompletion:
        """Decode sampled ids and read the content and tool calls out of them."""
        ids = list(completion_ids)
        if ids and ids[-1] in self.end_token_ids:
            ids.pop()
        raw = self.decode(ids)
        at = find_stop(raw, stop)
        visible = raw if at is None else raw[:at]
        text, calls = self.split_tool_calls(visible)
        return ParsedCompletion(raw_text=raw, visible_text=visible, text=text, tool_calls=calls)
