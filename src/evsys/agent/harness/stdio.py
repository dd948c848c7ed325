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
from typing import Any

from evsys.agent.harness.adapter import HarnessStartError, HarnessStateError
from evsys.agent.harness.events import HarnessEvent, HarnessEventType
from evsys.agent.harness.process import HarnessProcess
from evsys.agent.harness.turns import (
    STDERR_TAIL_BYTES,
    FailureKind,
    ProcessHarnessAdapter,
    ProtocolViolation,
    describe_exit,
    event_from_object,
    event_object,
)

__all__ = ["STDERR_TAIL_BYTES", "ProtocolViolation", "StdioHarnessAdapter"]

STOP_GRACE_S = 2.0


class StdioHarnessAdapter(ProcessHarnessAdapter):
    """A harness driven over stdin/stdout JSON lines; runs wherever its `ProcessLauncher` puts it."""

    ready_info: dict[str, Any]
    """The ready line's object (what the harness said about itself when it started)."""

    # -- protocol hooks -------------------------------------------------------------------------------------

    def encode_message(self, message: str) -> bytes:
        """The stdin line that starts a turn."""
        return (json.dumps({"type": "message", "content": message}) + "\n").encode()

    def parse_line(self, line: bytes) -> dict[str, Any]:
        """Decode a stdout line into a JSON object with a string `type`, else raise ProtocolViolation."""
        return event_object(line)

    def ready(self, obj: dict[str, Any]) -> bool:
        """Whether a line printed during startup says the harness is ready."""
        return bool(obj["type"] == "ready")

    def to_events(self, obj: dict[str, Any]) -> list[HarnessEvent]:
        """The events one protocol line stands for."""
        return [event_from_object(obj, self.turns)]

    # -- lifecycle -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Launch the harness and wait for its ready line."""
        if self.started:
            raise HarnessStateError(f"harness {self.config.name!r} is already started")
        self.started = True
        self.ready_info = {}
        await self.write_mcp_config()
        try:
            await self.launch(list(self.config.command))
        except OSError as exc:
            raise HarnessStartError(f"harness {self.config.name!r} could not be launched: {exc}") from exc
        assert self.process is not None
        try:
            await asyncio.wait_for(self._await_ready(self.process), self.config.startup_timeout_s)
        except TimeoutError:
            await self._kill()
            raise HarnessStartError(
                f"harness {self.config.name!r} did not become ready within "
                f"{self.config.startup_timeout_s:g} s{self.stderr_note()}"
            ) from None
        except HarnessStartError:
            await self._kill()
            raise

    async def _await_ready(self, process: HarnessProcess) -> None:
        while True:
            line = await process.stdout.readline()
            if not line:
                code = await process.wait()
                await self.drain_stderr()
                raise HarnessStartError(
                    f"harness {self.config.name!r} {describe_exit(code)} before it was ready"
                    + self.stderr_note()
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

    # -- turns ---------------------------------------------------------------------------------------------

    async def send_message_streaming(self, message: str) -> AsyncIterator[HarnessEvent]:
        """Run one turn; events end with TURN_COMPLETE (status "ok" or "error").

        A turn the caller abandons (stops iterating, or is cancelled by an agent timeout) kills the
        harness: its state is unknown and its late events must not leak into a later turn."""
        if not await self.is_alive():
            raise HarnessStateError(
                f"harness {self.config.name!r} is not running (start it, or it has exited)"
            )
        self._claim_turn()
        async with self._turn_lock:
            self.turns += 1
            turn = self.turns
            queue: asyncio.Queue[HarnessEvent] = asyncio.Queue()
            reader = asyncio.create_task(self._read_turn(queue))

            async def abandon() -> None:
                reader.cancel()
                await self._kill()

            finished = False
            try:
                with self._proxy_events(queue, lambda: self.turns):
                    if await self._send(message, queue):
                        async for event in self._until_turn_complete(queue, abandon, turn):
                            finished = event.type == HarnessEventType.TURN_COMPLETE
                            yield event
                    else:
                        while not queue.empty():
                            yield queue.get_nowait()
                        finished = True
            finally:
                reader.cancel()
                if not finished:  # abandoned or cancelled mid-turn: the harness's state is unknown
                    await self._kill()

    async def _send(self, message: str, queue: asyncio.Queue[HarnessEvent]) -> bool:
        """Write the turn's message; on failure kill the harness, queue a crash and return False."""
        assert self.process is not None
        try:
            self.process.stdin.write(self.encode_message(message))
            await self.process.stdin.drain()
        except (ConnectionError, OSError) as exc:
            await self._kill()
            self._put_failure(queue, "crash", f"could not send the message: {exc}{self.stderr_note()}")
            return False
        return True

    async def _read_turn(self, queue: asyncio.Queue[HarnessEvent]) -> None:
        assert self.process is not None
        while True:
            line = await self.process.stdout.readline()
            if not line:
                code = await self.process.wait()
                await self.drain_stderr()
                detail = f"the harness {describe_exit(code)} during the turn{self.stderr_note()}"
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

    def _put_failure(self, queue: asyncio.Queue[HarnessEvent], kind: FailureKind, message: str) -> None:
        for event in self._failure(kind, message, self.turns):
            queue.put_nowait(event)
