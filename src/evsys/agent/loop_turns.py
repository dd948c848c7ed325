"""The loop agent's turn records: a turn cut short, the assistant turn as it goes back into the chat, the
prefix check of token-exact trajectories, and the elision of old observations when the context is full."""

from __future__ import annotations

from evsys.agent.base import AgentContext
from evsys.model.base import Completion, Message
from evsys.records import StepMetrics

ELIDED = "[output elided to fit the context window]"


def record_cut_short(ctx: AgentContext, completion: Completion | None, events: list[str]) -> None:
    """A model turn cancelled mid-generation (an agent timeout, a cancelled job), recorded with the tokens
    it sampled so far and marked `finish_reason="cut_short"`; nothing when it sampled none."""
    if completion is None:
        return
    ctx.trajectory.add(
        "agent",
        completion.text,
        metrics=StepMetrics.from_completion(completion),
        finish_reason="cut_short",
        context_events=[*events, "cut short: the model call was cancelled mid-generation"],
    )


def history_message(completion: Completion) -> Message:
    """The assistant turn as it goes back into the chat.

    When the backend reports the exact completion text (the local engine), the turn is replayed verbatim —
    tool-call markup included, even a malformed call — so the next prompt extends this turn's tokens.
    Otherwise the OpenAI shape (content + tool_calls) is used, as remote APIs require.
    """
    if completion.raw_text is not None:
        return {"role": "assistant", "content": completion.raw_text}
    return completion.to_message()


def prefix_check(previous: Completion | None, current: Completion) -> tuple[bool | None, int | None]:
    """Whether `current`'s prompt ids start with `previous`'s prompt + completion ids (None when unknown).

    On a break, also the index of the first token that differs.
    """
    if previous is None or current.prompt_token_ids is None:
        return None, None
    if previous.prompt_token_ids is None or previous.completion_token_ids is None:
        return None, None
    before = previous.prompt_token_ids + previous.completion_token_ids
    now = current.prompt_token_ids
    for index, token in enumerate(before):
        if index >= len(now) or now[index] != token:
            return False, index
    return True, None


def elide_oldest_observation(messages: list[Message]) -> bool:
    for message in messages:
        if message.get("role") == "tool" and message.get("content") != ELIDED:
            message["content"] = ELIDED
            return True
    return False
