"""`PerTurnHarnessAdapter`: harnesses that run one process per conversational turn (`codex exec`, `mini`).

`start()` writes the MCP configuration (when tools were injected) and calls `prepare()` (config files);
no process runs between turns. Each `send_message_streaming` launches `turn_argv(message, turn)` in
`config.working_directory` with `environment()`, writes `turn_stdin(...)` (if any) and closes stdin, and maps
every stdout line through `parse_line` while the proxy session's model calls are interleaved as
LLM_REQUEST / LLM_RESPONSE events. When the process exits, its whole process tree is killed (nothing it
started in the background outlives the turn), `after_turn(turn, exit_code)` adds its events (e.g. from the
harness's native log) and TURN_COMPLETE ends the turn: status "ok" for exit code 0 (with the fields of
`turn_summary`), else "error".

Failures end the turn with ERROR + TURN_COMPLETE(status="error") and kill the process tree: a non-zero exit
(`crash`), running past `session_timeout_s` (`timeout`) or a stdout line `parse_line` rejects (`protocol`).
A turn abandoned by the caller (or cancelled) is killed too. `stop()` kills a running turn; a stopped
adapter refuses further turns."""

from __future__ import annotations

import asyncio
import contextlib
from abc import abstractmethod
from collections.abc import AsyncIterator
from typing import Any

from evsys.agent.harness.adapter import HarnessStartError, HarnessStateError
from evsys.agent.harness.events import HarnessEvent, HarnessEventType
from evsys.agent.harness.process import HarnessProcess
from evsys.agent.harness.turns import (
    ProcessHarnessAdapter,
    ProtocolViolation,
    describe_exit,
    event_from_object,
    event_object,
)

EXIT_POLL_S = 0.25  # asyncio's wait() also waits for the pipes to close: the exit code is polled as well
EXIT_DRAIN_S = 2.0  # after the process exits: longest wait for its stdout to close before the tree is killed


class PerTurnHarnessAdapter(ProcessHarnessAdapter):
    """Base class of one-process-per-turn harnesses; subclasses implement `turn_argv` (and other hooks)."""

    stopped = False

    # -- hooks for subclasses ------------------------------------------------------------------------------

    @abstractmethod
    def turn_argv(self, message: str, turn: int) -> list[str]:
        """The argv of the process that runs turn `turn` (counting from 1) with `message`."""

    def turn_stdin(self, message: str, turn: int) -> bytes | None:
        """What to write to the turn's stdin before closing it (None: close it at once)."""
        return None

    def parse_line(self, line: bytes, turn: int) -> list[HarnessEvent]:
        """evsys JSON event lines (`{"type": "text_output", "text": ...}`); ProtocolViolation on garbage.

        A `turn_complete` line is accepted and dropped: the turn ends when the process exits."""
        event = event_from_object(event_object(line), turn)
        return [] if event.type == HarnessEventType.TURN_COMPLETE else [event]

    async def prepare(self) -> None:
        """Called by `start()`: write the harness's configuration files (via `self.launcher.write_file`)."""

    async def after_turn(self, turn: int, exit_code: int) -> list[HarnessEvent]:
        """Called once the turn's process exited on its own: extra events (e.g. from its native log)."""
        return []

    def turn_summary(self, turn: int) -> dict[str, Any]:
        """Extra fields for the TURN_COMPLETE of a turn that ended well (called after `after_turn`)."""
        return {}

    # -- lifecycle -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Write the MCP configuration and call `prepare()`; no process runs until the first turn."""
        if self.started:
            raise HarnessStateError(f"harness {self.config.name!r} is already started")
        self.started = True
        try:
            await self.write_mcp_config()
            await self.prepare()
        except OSError as exc:
            raise HarnessStartError(f"harness {self.config.name!r} could not be prepared: {exc}") from exc

    async def is_alive(self) -> bool:
        """True between `start()` and `stop()` (a turn's process runs only during the turn)."""
        return self.started and not self.stopped

    async def stop(self) -> None:
        """Kill a running turn's process tree; later turns are refused (idempotent)."""
        self.stopped = True
        await self._kill()

    # -- turns ---------------------------------------------------------------------------------------------

    async def send_message_streaming(self, message: str) -> AsyncIterator[HarnessEvent]:
        """Run one turn in a fresh process; events end with TURN_COMPLETE (status "ok" or "error")."""
        if not self.started or self.stopped:
            state = "stopped" if self.stopped else "not started"
            raise HarnessStateError(f"harness {self.config.name!r} is {state}: no turn can run")
        self._claim_turn()
        async with self._turn_lock:
            self.turns += 1
            turn = self.turns
            queue: asyncio.Queue[HarnessEvent] = asyncio.Queue()
            runner = asyncio.create_task(self._run_turn(message, turn, queue))

            async def abandon() -> None:
                runner.cancel()
                await self._kill()

            try:
                with self._proxy_events(queue, lambda: turn):
                    async for event in self._until_turn_complete(queue, abandon, turn):
                        yield event
            finally:
                runner.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await runner
                await self._kill()  # the whole tree: nothing the turn started survives it
                self.process = None

    async def _run_turn(self, message: str, turn: int, queue: asyncio.Queue[HarnessEvent]) -> None:
        """Run the turn; a bug in a subclass hook ends it with an error instead of waiting for the timeout."""
        try:
            await self._run_process(message, turn, queue)
        except Exception as exc:
            await self._kill()
            detail = f"the adapter failed during the turn: {type(exc).__name__}: {exc}"
            for event in self._failure("crash", detail, turn):
                queue.put_nowait(event)

    async def _run_process(self, message: str, turn: int, queue: asyncio.Queue[HarnessEvent]) -> None:
        """Launch, feed stdin, map stdout, wait for the exit, then `after_turn` and TURN_COMPLETE."""
        put = queue.put_nowait
        try:
            process = await self.launch(self.turn_argv(message, turn))
        except OSError as exc:
            for event in self._failure("crash", f"could not be launched: {exc}", turn):
                put(event)
            return
        await self._feed_stdin(process, self.turn_stdin(message, turn))
        reader = asyncio.create_task(self._read_stdout(process, turn, queue))
        try:
            code = await _wait_exit(process, reader)
        except BaseException:
            reader.cancel()
            raise
        try:
            violation = await asyncio.wait_for(asyncio.shield(reader), EXIT_DRAIN_S)
        except TimeoutError:  # something it started still holds stdout: kill the tree, keep what was read
            await process.kill()
            violation = await reader
        if violation is not None:
            for event in self._failure("protocol", f"the harness broke its protocol: {violation}", turn):
                put(event)
            return
        await self.drain_stderr()
        await self._finish(turn, code, queue)

    async def _feed_stdin(self, process: HarnessProcess, data: bytes | None) -> None:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            if data:
                process.stdin.write(data)
                await process.stdin.drain()
            process.stdin.close()

    async def _read_stdout(
        self, process: HarnessProcess, turn: int, queue: asyncio.Queue[HarnessEvent]
    ) -> ProtocolViolation | None:
        """Map stdout lines to events until EOF; on a bad line kill the process and return the violation."""
        while line := await process.stdout.readline():
            if not line.strip():
                continue
            try:
                events = self.parse_line(line, turn)
            except ProtocolViolation as exc:
                await process.kill()
                return exc
            for event in events:
                queue.put_nowait(event)
        return None

    async def _finish(self, turn: int, code: int, queue: asyncio.Queue[HarnessEvent]) -> None:
        try:
            for event in await self.after_turn(turn, code):
                queue.put_nowait(event)
        except Exception as exc:  # a broken native log must not lose the turn's outcome
            detail = f"reading the harness's output after turn {turn} failed: {type(exc).__name__}: {exc}"
            data: dict[str, Any] = {
                "kind": "after_turn",
                "message": f"harness {self.config.name!r}: {detail}",
            }
            queue.put_nowait(HarnessEvent(type=HarnessEventType.ERROR, data=data, turn=turn))
        if code != 0:
            stopped = " (stop() was called during the turn)" if self.stopped else ""
            detail = f"the harness {describe_exit(code)}{stopped}{self.stderr_note()}"
            for event in self._failure("crash", detail, turn):
                queue.put_nowait(event)
            return
        data = {**self.turn_summary(turn), "status": "ok", "exit_code": code}
        queue.put_nowait(HarnessEvent(type=HarnessEventType.TURN_COMPLETE, data=data, turn=turn))


async def _wait_exit(process: HarnessProcess, reader: asyncio.Task[ProtocolViolation | None]) -> int:
    """The exit code as soon as the process exits, even while a child it left behind holds its pipes; the
    stdout reader's exception (a failing `parse_line`) is raised at once."""
    waiter = asyncio.ensure_future(process.wait())
    try:
        while process.returncode is None:
            watched = {waiter} if reader.done() else {waiter, reader}
            done, _ = await asyncio.wait(watched, timeout=EXIT_POLL_S)
            failure = reader.exception() if reader in done else None
            if failure is not None:
                raise failure
            if waiter in done:
                return waiter.result()
        return process.returncode
    finally:
        waiter.cancel()
