"""Pieces every process-based harness adapter shares: protocol errors, failure events, stderr tails, and the
proxy listener that turns a session's model calls into LLM_REQUEST / LLM_RESPONSE events.

Used by `StdioHarnessAdapter` (one long-lived process) and `PerTurnHarnessAdapter` (one process per turn)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any, Literal

from evsys.agent.harness.events import HarnessEvent, HarnessEventType

STDERR_TAIL_BYTES = 4096
DRAIN_S = 1.0  # longest wait for a dead process's stderr to close
FailureKind = Literal["crash", "timeout", "protocol"]


class ProtocolViolation(ValueError):
    """A line from the harness that is not part of its protocol."""


def json_object(line: str | bytes) -> dict[str, Any] | None:
    """`line` parsed as a JSON object, or None (not JSON, or not an object): for reading harness logs."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def describe_exit(code: int | None) -> str:
    """'exited with code N' or 'was killed by signal N'."""
    if code is not None and code < 0:
        return f"was killed by signal {-code}"
    return f"exited with code {code}"


def failure_events(harness: str, kind: FailureKind, message: str, turn: int) -> list[HarnessEvent]:
    """ERROR then TURN_COMPLETE(status="error"), both naming the harness and the kind of failure."""
    error = f"harness {harness!r}: {message}"
    return [
        HarnessEvent(type=HarnessEventType.ERROR, data={"kind": kind, "message": error}, turn=turn),
        HarnessEvent(
            type=HarnessEventType.TURN_COMPLETE,
            data={"status": "error", "kind": kind, "error": error},
            turn=turn,
        ),
    ]


class StderrTail:
    """Collects the last STDERR_TAIL_BYTES a process writes to stderr, in a background task."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self._buffer = bytearray()
        self._task = asyncio.create_task(self._collect(stream))

    async def _collect(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(4096):
            self._buffer += chunk
            del self._buffer[:-STDERR_TAIL_BYTES]

    async def drain(self) -> None:
        """Wait (at most DRAIN_S) until the stream is closed, so the tail is complete."""
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(self._task), DRAIN_S)

    def cancel(self) -> None:
        """Stop collecting."""
        self._task.cancel()

    @property
    def text(self) -> str:
        """The tail as text."""
        return self._buffer.decode("utf-8", "replace")

    def note(self) -> str:
        """'; stderr: ...' for error messages (or a note that it printed nothing)."""
        tail = self.text.strip()
        return f"; stderr: {tail[-1000:]}" if tail else "; it printed nothing on stderr"


def proxy_call_listener(
    queue: asyncio.Queue[HarnessEvent], current_turn: Callable[[], int]
) -> Callable[[str, Any], None]:
    """A `ProxySession` listener putting LLM_REQUEST / LLM_RESPONSE events for each call on `queue`."""

    def on_call(kind: str, call: Any) -> None:
        turn = current_turn()
        if kind == "request":
            data = {"call_index": call.index, "model": call.requested_model, "messages": len(call.messages)}
            queue.put_nowait(HarnessEvent(type=HarnessEventType.LLM_REQUEST, data=data, turn=turn))
            return
        done = call.completion
        data = {"call_index": call.index, "latency_s": call.latency_s, "error": call.error}
        if done is not None:
            data |= {
                "text": done.text,
                "tool_calls": [c.name for c in done.tool_calls],
                "completion_tokens": done.usage.completion_tokens,
            }
        queue.put_nowait(HarnessEvent(type=HarnessEventType.LLM_RESPONSE, data=data, turn=turn))

    return on_call
