"""Harness events (RFC 005) and the summary of one conversational turn.

A turn streams events as they happen; the last one is always `TURN_COMPLETE`, whose `data["status"]` is
"ok" or "error" (then `data["error"]` says why: the harness crashed, hung past its session timeout, or
broke its protocol)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
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


MAX_KEPT_EVENTS = 10_000
MAX_KEPT_EVENT_BYTES = 64 * 1024 * 1024


class EventLog:
    """The events of a harness run that the orchestrator keeps, bounded: past `max_events` events or
    `max_bytes` of their JSON, further events are counted in `dropped` instead of kept. TURN_COMPLETE is
    always kept (turns are few), so every turn's outcome survives a harness that floods its event stream."""

    def __init__(self, max_events: int = MAX_KEPT_EVENTS, max_bytes: int = MAX_KEPT_EVENT_BYTES) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.events: list[HarnessEvent] = []
        self.dropped = 0
        self._bytes = 0

    def append(self, event: HarnessEvent) -> None:
        """Keep `event` if there is room (always for TURN_COMPLETE), else count it as dropped."""
        size = len(event.model_dump_json())
        full = len(self.events) >= self.max_events or self._bytes + size > self.max_bytes
        if full and event.type != HarnessEventType.TURN_COMPLETE:
            self.dropped += 1
            return
        self.events.append(event)
        self._bytes += size

    def extend(self, events: EventLog) -> None:
        """Append another log's kept events and count its dropped ones."""
        for event in events:
            self.append(event)
        self.dropped += events.dropped

    @property
    def last(self) -> HarnessEvent | None:
        """The last kept event (a turn's TURN_COMPLETE once the turn ended)."""
        return self.events[-1] if self.events else None

    @property
    def seen(self) -> int:
        """Every event appended, kept or dropped."""
        return len(self.events) + self.dropped

    def __iter__(self) -> Iterator[HarnessEvent]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    def jsonl(self) -> str:
        """The kept events as JSON lines, then (when some were dropped) a line saying how many."""
        lines = [json.dumps(e.model_dump(mode="json")) + "\n" for e in self.events]
        if self.dropped:
            note = {"type": "events_dropped", "count": self.dropped, "kept": len(self.events)}
            lines.append(json.dumps(note) + "\n")
        return "".join(lines)


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
