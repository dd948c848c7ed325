"""Harness events (RFC 005) and the summary of one conversational turn.

A turn streams events as they happen; the last one is always `TURN_COMPLETE`, whose `data["status"]` is
"ok" or "error" (then `data["error"]` says why: the harness crashed, hung past its session timeout, or
broke its protocol)."""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


class HarnessEventType(StrEnum):
    """What happened."""

    LLM_REQUEST = "llm_request"
    LLM_RESPONSE = "llm_response"
    LLM_CHUNK = "llm_chunk"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    TEXT_OUTPUT = "text_output"
    ERROR = "error"
    TURN_COMPLETE = "turn_complete"


class HarnessEvent(BaseModel):
    """One event of a harness turn."""

    type: HarnessEventType
    timestamp: float = Field(default_factory=time.time)
    data: dict[str, Any] = Field(default_factory=dict)
    turn: int = Field(0, description="1-based turn number within the harness session.")


class HarnessTurn(BaseModel):
    """Everything one `send_message` produced."""

    turn: int
    events: list[HarnessEvent]
    ok: bool
    error: str | None = None
    duration_s: float = 0.0

    @property
    def text(self) -> str:
        """The harness's text output of the turn, joined by newlines."""
        return "\n".join(
            str(e.data.get("text", "")) for e in self.events if e.type == HarnessEventType.TEXT_OUTPUT
        )

    def of_type(self, kind: HarnessEventType) -> list[HarnessEvent]:
        """The turn's events of one type."""
        return [e for e in self.events if e.type == kind]
