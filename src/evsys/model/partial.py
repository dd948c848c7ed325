"""What a model call generated before it was cut off.

An agent timeout (or a cancelled job) cancels a model call mid-generation; without more, the tokens sampled
so far are lost with it. A caller that wants them opens `watch_partial()` around the call: a client that
samples token by token (the local engine) fills the `PartialTurn` it finds with `current_partial()` as each
token comes, and after the cancellation the caller still has the prompt and those tokens
(`PartialTurn.completion()`), to record as a turn marked cut short.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

from evsys.model.base import Completion
from evsys.records import Usage

_PARTIAL: ContextVar[PartialTurn | None] = ContextVar("evsys_partial_turn", default=None)


@dataclass
class PartialTurn:
    """The prompt and the tokens (with their sampling logprobs) a model call has generated so far; `decode`
    (set by the client) turns token ids into text."""

    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    decode: Callable[[list[int]], str] | None = None

    def add(self, token: int, logprob: float) -> None:
        """One sampled token (called from the client's sampling thread)."""
        self.completion_token_ids.append(token)
        self.logprobs.append(logprob)

    def completion(self, model: str = "") -> Completion | None:
        """The tokens so far as a `Completion` (finish reason `length`: generation stopped early), or None
        when nothing was sampled yet."""
        count = min(len(self.completion_token_ids), len(self.logprobs))  # the sampler may be mid-token
        if self.prompt_token_ids is None or count == 0:
            return None
        ids = self.completion_token_ids[:count]
        return Completion(
            text=self.decode(ids) if self.decode is not None else "",
            finish_reason="length",
            prompt_token_ids=list(self.prompt_token_ids),
            completion_token_ids=ids,
            logprobs=self.logprobs[:count],
            usage=Usage(prompt_tokens=len(self.prompt_token_ids), completion_tokens=count),
            model=model,
        )


@contextlib.contextmanager
def watch_partial() -> Iterator[PartialTurn]:
    """A fresh `PartialTurn` that model calls made inside the block (in this task) fill in."""
    partial = PartialTurn()
    token = _PARTIAL.set(partial)
    try:
        yield partial
    finally:
        _PARTIAL.reset(token)


def current_partial() -> PartialTurn | None:
    """The `PartialTurn` a caller opened around this model call, if any (for clients to fill in)."""
    return _PARTIAL.get()
