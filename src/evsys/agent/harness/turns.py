"""What every process-based harness adapter shares: the `ProcessHarnessAdapter` base class (launcher, turn
lock, environment, stderr tail, JSON event lines, the session-timeout loop), protocol errors, failure events,
and the proxy listener that turns a session's model calls into LLM_REQUEST / LLM_RESPONSE events.

Subclassed by `StdioHarnessAdapter` (one long-lived process) and `PerTurnHarnessAdapter` (one process per
turn)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Literal

from evsys.agent.harness.adapter import HarnessAdapter, HarnessStateError, McpEndpoint
from evsys.agent.harness.config import HarnessConfig, ModelEndpoint
from evsys.agent.harness.events import HarnessEvent, HarnessEventType
from evsys.agent.harness.process import HarnessProcess, HostProcessLauncher, ProcessLauncher
from evsys.task.models import McpServerConfig

STDERR_TAIL_BYTES = 4096
DRAIN_S = 1.0  # longest wait for a dead process's stderr to close
FailureKind = Literal["crash", "timeout", "protocol"]
_EVENT_TYPES = {t.value: t for t in HarnessEventType}


class ProtocolViolation(ValueError):
    """A line from the harness that is not part of its protocol."""


def json_object(line: str | bytes) -> dict[str, Any] | None:
    """`line` parsed as a JSON object, or None (not JSON, or not an object): for reading harness logs."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def event_object(line: bytes) -> dict[str, Any]:
    """A protocol line as a JSON object with a string `type`; ProtocolViolation for anything else."""
    obj = json_object(line)
    if obj is None or not isinstance(obj.get("type"), str):
        raise ProtocolViolation(f"expected a JSON event line, got {line[:200]!r}")
    return obj


def event_from_object(obj: dict[str, Any], turn: int) -> HarnessEvent:
    """The event an evsys protocol object stands for (`type` one of HarnessEventType's values)."""
    kind = _EVENT_TYPES.get(obj["type"])
    if kind is None:
        raise ProtocolViolation(f"unknown event type {obj['type']!r}")
    return HarnessEvent(type=kind, data={k: v for k, v in obj.items() if k != "type"}, turn=turn)


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
                "tool_calls": [c.function_name for c in done.tool_calls],
                "completion_tokens": done.usage.completion_tokens,
            }
        queue.put_nowait(HarnessEvent(type=HarnessEventType.LLM_RESPONSE, data=data, turn=turn))

    return on_call


class ProcessHarnessAdapter(HarnessAdapter):
    """Base of adapters that run the harness as a process where their `ProcessLauncher` puts it (the host, a
    sandbox). Subclasses implement the lifecycle; this class holds what they share."""

    def __init__(
        self,
        config: HarnessConfig,
        *,
        launcher: ProcessLauncher | None = None,
        endpoint: ModelEndpoint | None = None,
        mcp: McpEndpoint | None = None,
        mcp_servers: list[McpServerConfig] | None = None,
    ) -> None:
        super().__init__(config, endpoint=endpoint, mcp=mcp, mcp_servers=mcp_servers)
        self.launcher: ProcessLauncher = launcher or HostProcessLauncher()
        self.process: HarnessProcess | None = None
        self.turns = 0
        self._stderr: StderrTail | None = None
        self._turn_lock = asyncio.Lock()

    def environment(self) -> dict[str, str]:
        """The process environment: model endpoint variables, then the config's own variables."""
        return {**self.model_env(), **self.config.env_vars}

    async def write_mcp_config(self) -> None:
        """Write the MCP configuration where the harness reads it (when tools were injected)."""
        mcp_config = self.render_mcp_config()
        if mcp_config is not None:
            await self.launcher.write_file(self.config.mcp_config_path or "", mcp_config)

    async def launch(self, argv: list[str]) -> HarnessProcess:
        """Start `argv` in the working directory with `environment()`, collecting its stderr tail."""
        process = await self.launcher.launch(argv, env=self.environment(), cwd=self.config.working_directory)
        self.process = process
        self._stderr = StderrTail(process.stderr)
        return process

    @property
    def stderr_tail(self) -> str:
        """The last few KB the (latest) process wrote to stderr."""
        return self._stderr.text if self._stderr is not None else ""

    def stderr_note(self) -> str:
        """'; stderr: ...' for error messages (or a note that it printed nothing)."""
        return self._stderr.note() if self._stderr is not None else "; it printed nothing on stderr"

    async def drain_stderr(self) -> None:
        """Wait briefly for the process's stderr to close, so the tail is complete."""
        if self._stderr is not None:
            await self._stderr.drain()

    async def _kill(self) -> None:
        """Kill the process tree and finish reading its stderr."""
        if self.process is not None:
            await self.process.kill()
        if self._stderr is not None:
            await self._stderr.drain()
            self._stderr.cancel()

    def _claim_turn(self) -> None:
        if self._turn_lock.locked():
            raise HarnessStateError(f"harness {self.config.name!r} is already running a turn")

    @contextlib.contextmanager
    def _proxy_events(
        self, queue: asyncio.Queue[HarnessEvent], current_turn: Callable[[], int]
    ) -> Iterator[None]:
        """While inside, the endpoint session's model calls arrive on `queue` as LLM events."""
        session = self.endpoint.session if self.endpoint else None
        listener = proxy_call_listener(queue, current_turn)
        if session is not None:
            session.add_listener(listener)
        try:
            yield
        finally:
            if session is not None:
                session.remove_listener(listener)

    def _failure(self, kind: FailureKind, message: str, turn: int) -> list[HarnessEvent]:
        return failure_events(self.config.name, kind, message, turn)

    async def _until_turn_complete(
        self, queue: asyncio.Queue[HarnessEvent], abandon: Callable[[], Awaitable[None]], turn: int
    ) -> AsyncIterator[HarnessEvent]:
        """Yield the turn's events up to TURN_COMPLETE; past `session_timeout_s`, `abandon()` it and end the
        turn with a timeout failure."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.session_timeout_s
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                await abandon()
                limit = self.config.session_timeout_s
                for failure in self._failure(
                    "timeout", f"the turn ran past the session timeout of {limit:g} s", turn
                ):
                    yield failure
                return
            yield event
            if event.type == HarnessEventType.TURN_COMPLETE:
                return
