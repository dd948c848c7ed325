"""`StdioHarnessAdapter`: a long-lived harness process spoken to with JSON lines on stdin/stdout.

The evsys stdio protocol (subclasses map a harness's native stream, e.g. Claude Code's stream-json, by
overriding `encode_message`, `parse_line` and `ready`):

- the harness prints `{"type": "ready"}` once it can take messages (within `startup_timeout_s`);
- evsys writes one `{"type": "message", "content": "..."}` line per turn;
- the harness prints event lines `{"type": "<event type>", ...fields}` with the types of `HarnessEventType`
  (`text_output` with `text`, `tool_call`, `tool_result`, `error`...), and `{"type": "turn_complete"}` to end
  the turn.

Failures end the turn with an ERROR event and `TURN_COMPLETE(status="error")`, and the harness is killed:
it exits mid-turn (`crash`), runs past `session_timeout_s` (`timeout`) or prints a line that is not a JSON
event (`protocol`). The model calls of the turn, seen by the proxy session of the endpoint, are
interleaved as LLM_REQUEST / LLM_RESPONSE events."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any, Literal

from evsys.agent.harness.adapter import HarnessAdapter, HarnessStartError, HarnessStateError, McpEndpoint
from evsys.agent.harness.config import HarnessConfig, ModelEndpoint
from evsys.agent.harness.events import HarnessEvent, HarnessEventType
from evsys.agent.harness.process import HarnessProcess, HostProcessLauncher, ProcessLauncher
from evsys.agent.harness.turns import (
    STDERR_TAIL_BYTES,
    ProtocolViolation,
    failure_events,
    proxy_call_listener,
)
from evsys.agent.harness.turns import describe_exit as _describe_exit

__all__ = ["STDERR_TAIL_BYTES", "ProtocolViolation", "StdioHarnessAdapter"]

STOP_GRACE_S = 2.0
_EVENT_TYPES = {t.value: t for t in HarnessEventType}


class StdioHarnessAdapter(HarnessAdapter):
    """A harness driven over stdin/stdout JSON lines; runs wherever its `ProcessLauncher` puts it."""

    def __init__(
        self,
        config: HarnessConfig,
        *,
        launcher: ProcessLauncher | None = None,
        endpoint: ModelEndpoint | None = None,
        mcp: McpEndpoint | None = None,
    ) -> None:
        super().__init__(config, endpoint=endpoint, mcp=mcp)
        self.launcher = launcher or HostProcessLauncher()
        self.process: HarnessProcess | None = None
        self.ready_info: dict[str, Any] = {}
        self.turns = 0
        self._stderr = bytearray()
        self._stderr_task: asyncio.Task | None = None
        self._turn_lock = asyncio.Lock()

    # -- protocol hooks -------------------------------------------------------------------------------------

    def encode_message(self, message: str) -> bytes:
        """The stdin line that starts a turn."""
        return (json.dumps({"type": "message", "content": message}) + "\n").encode()

    def parse_line(self, line: bytes) -> dict[str, Any]:
        """Decode a stdout line into a JSON object with a string `type`, else raise ProtocolViolation."""
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            raise ProtocolViolation(f"expected a JSON event line, got {line[:200]!r}")
        return obj

    def ready(self, obj: dict[str, Any]) -> bool:
        """Whether a line printed during startup says the harness is ready."""
        return obj["type"] == "ready"

    def to_events(self, obj: dict[str, Any]) -> list[HarnessEvent]:
        """The events one protocol line stands for."""
        kind = _EVENT_TYPES.get(obj["type"])
        if kind is None:
            raise ProtocolViolation(f"unknown event type {obj['type']!r}")
        data = {k: v for k, v in obj.items() if k != "type"}
        return [HarnessEvent(type=kind, data=data, turn=self.turns)]

    # -- lifecycle -----------------------------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        """The harness's environment: model endpoint variables, then the config's own variables."""
        return {**self.model_env(), **self.config.env_vars}

    async def start(self) -> None:
        """Launch the harness and wait for its ready line."""
        if self.started:
            raise HarnessStateError(f"harness {self.config.name!r} is already started")
        self.started = True
        mcp_config = self.render_mcp_config()
        if mcp_config is not None:
            await self.launcher.write_file(self.config.mcp_config_path or "", mcp_config)
        try:
            self.process = await self.launcher.launch(
                list(self.config.command), env=self.environment(), cwd=self.config.working_directory
            )
        except OSError as exc:
            raise HarnessStartError(f"harness {self.config.name!r} could not be launched: {exc}") from exc
        self._stderr_task = asyncio.create_task(self._collect_stderr(self.process))
        try:
            await asyncio.wait_for(self._await_ready(self.process), self.config.startup_timeout_s)
        except TimeoutError:
            await self._kill()
            raise HarnessStartError(
                f"harness {self.config.name!r} did not become ready within "
                f"{self.config.startup_timeout_s:g} s{self._stderr_note()}"
            ) from None
        except HarnessStartError:
            await self._kill()
            raise

    async def _await_ready(self, process: HarnessProcess) -> None:
        while True:
            line = await process.stdout.readline()
            if not line:
                code = await process.wait()
                await self._drain_stderr()
                raise HarnessStartError(
                    f"harness {self.config.name!r} {_describe_exit(code)} before it was ready"
                    f"{self._stderr_note()}"
                )
            if not line.strip():
                continue
            try:
                obj = self.parse_line(line)
            except ProtocolViolation as exc:
                raise HarnessStartError(
                    f"harness {self.config.name!r} broke its protocol while starting: {exc}"
                ) from None
            if self.ready(obj):
                self.ready_info = obj
                return

    async def _collect_stderr(self, process: HarnessProcess) -> None:
        while chunk := await process.stderr.read(4096):
            self._stderr += chunk
            del self._stderr[:-STDERR_TAIL_BYTES]

    async def _drain_stderr(self) -> None:
        if self._stderr_task is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._stderr_task), 1.0)

    def _stderr_note(self) -> str:
        tail = self._stderr.decode("utf-8", "replace").strip()
        return f"; stderr: {tail[-1000:]}" if tail else "; it printed nothing on stderr"

    @property
    def stderr_tail(self) -> str:
        """The last few KB the harness wrote to stderr."""
        return self._stderr.decode("utf-8", "replace")

    async def is_alive(self) -> bool:
        """True while the harness process runs."""
        return self.process is not None and self.process.returncode is None

    async def stop(self) -> None:
        """Close stdin, give the harness STOP_GRACE_S to exit, then kill its process tree."""
        process = self.process
        if process is None:
            return
        if process.returncode is None:
            with contextlib.suppress(OSError, RuntimeError):
                process.stdin.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), STOP_GRACE_S)
        await self._kill()

    async def _kill(self) -> None:
        if self.process is not None:
            await self.process.kill()
        if self._stderr_task is not None:
            await self._drain_stderr()
            self._stderr_task.cancel()

    # -- turns ---------------------------------------------------------------------------------------------

    async def send_message_streaming(self, message: str) -> AsyncIterator[HarnessEvent]:
        """Run one turn; events end with TURN_COMPLETE (status "ok" or "error").

        A turn the caller abandons (stops iterating, or is cancelled by an agent timeout) kills the
        harness: its state is unknown and its late events must not leak into a later turn."""
        if not await self.is_alive():
            raise HarnessStateError(
                f"harness {self.config.name!r} is not running (start it, or it has exited)"
            )
        if self._turn_lock.locked():
            raise HarnessStateError(f"harness {self.config.name!r} is already running a turn")
        async with self._turn_lock:
            self.turns += 1
            queue: asyncio.Queue[HarnessEvent] = asyncio.Queue()
            listener = self._proxy_listener(queue)
            session = self.endpoint.session if self.endpoint else None
            if session is not None:
                session.add_listener(listener)
            reader = asyncio.create_task(self._read_turn(queue))
            finished = False
            try:
                async for event in self._drain(queue, reader, message):
                    finished = event.type == HarnessEventType.TURN_COMPLETE
                    yield event
            finally:
                reader.cancel()
                if session is not None:
                    session.remove_listener(listener)
                if not finished:  # abandoned or cancelled mid-turn: the harness's state is unknown
                    await self._kill()

    async def _drain(
        self, queue: asyncio.Queue[HarnessEvent], reader: asyncio.Task, message: str
    ) -> AsyncIterator[HarnessEvent]:
        assert self.process is not None
        try:
            self.process.stdin.write(self.encode_message(message))
            await self.process.stdin.drain()
        except (ConnectionError, OSError) as exc:
            await self._kill()
            for event in self._failure("crash", f"could not send the message: {exc}{self._stderr_note()}"):
                yield event
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.session_timeout_s
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                reader.cancel()
                await self._kill()
                limit = self.config.session_timeout_s
                for failure in self._failure(
                    "timeout", f"the turn ran past the session timeout of {limit:g} s"
                ):
                    yield failure
                return
            yield event
            if event.type == HarnessEventType.TURN_COMPLETE:
                return

    async def _read_turn(self, queue: asyncio.Queue[HarnessEvent]) -> None:
        assert self.process is not None
        while True:
            line = await self.process.stdout.readline()
            if not line:
                code = await self.process.wait()
                await self._drain_stderr()
                detail = f"the harness {_describe_exit(code)} during the turn{self._stderr_note()}"
                self._put_failure(queue, "crash", detail)
                return
            if not line.strip():
                continue
            try:
                events = self.to_events(self.parse_line(line))
            except ProtocolViolation as exc:
                await self._kill()
                self._put_failure(queue, "protocol", f"the harness broke its protocol: {exc}")
                return
            for event in events:
                if event.type == HarnessEventType.TURN_COMPLETE:
                    event.data.setdefault("status", "ok")
                queue.put_nowait(event)
                if event.type == HarnessEventType.TURN_COMPLETE:
                    return

    def _failure(self, kind: Literal["crash", "timeout", "protocol"], message: str) -> list[HarnessEvent]:
        return failure_events(self.config.name, kind, message, self.turns)

    def _put_failure(self, queue: asyncio.Queue[HarnessEvent], kind: Any, message: str) -> None:
        for event in self._failure(kind, message):
            queue.put_nowait(event)

    def _proxy_listener(self, queue: asyncio.Queue[HarnessEvent]) -> Any:
        return proxy_call_listener(queue, lambda: self.turns)
