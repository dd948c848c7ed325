"""ACP terminals served in the sandbox: `terminal/create` runs the command through the adapter's
`ProcessLauncher` (as the sandbox's agent user, with the harness's environment plus the request's variables);
stdout and stderr are collected into one buffer, cut from the front to the request's `outputByteLimit` (at
a character boundary, as the protocol asks); `wait`, `kill` and `release` map onto the process."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from acp import RequestError
from acp.schema import TerminalExitStatus, TerminalOutputResponse

from evsys.agent.harness.process import HarnessProcess, ProcessLauncher

DEFAULT_OUTPUT_LIMIT = 1024 * 1024
MAX_TERMINALS = 64


class Terminal:
    """One running (or finished) command and its collected output."""

    def __init__(self, process: HarnessProcess, limit: int) -> None:
        self.process = process
        self.limit = limit
        self.buffer = bytearray()
        self.truncated = False
        self.readers = [asyncio.create_task(self._collect(s)) for s in (process.stdout, process.stderr)]

    async def _collect(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            self.buffer += chunk
            if len(self.buffer) > self.limit:
                del self.buffer[: len(self.buffer) - self.limit]
                while self.buffer and (self.buffer[0] & 0xC0) == 0x80:  # never start inside a character
                    del self.buffer[0]
                self.truncated = True

    def status(self) -> TerminalExitStatus | None:
        """The exit status once the command exited."""
        code = self.process.returncode
        if code is None:
            return None
        return TerminalExitStatus(
            exit_code=code if code >= 0 else None, signal=None if code >= 0 else f"{-code}"
        )

    def output(self) -> TerminalOutputResponse:
        """What the command printed so far (the end of it, within the limit)."""
        text = self.buffer.decode("utf-8", "replace")
        return TerminalOutputResponse(output=text, truncated=self.truncated, exit_status=self.status())

    async def wait(self) -> TerminalExitStatus:
        """Wait for the exit (and the end of its output)."""
        await self.process.wait()
        await asyncio.gather(*self.readers, return_exceptions=True)
        status = self.status()
        assert status is not None
        return status

    async def kill(self) -> None:
        """Kill the command and everything it started."""
        if self.process.returncode is None:
            await self.process.kill()

    async def close(self) -> None:
        """Kill and stop reading."""
        await self.kill()
        for reader in self.readers:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader


class Terminals:
    """The terminals of one ACP connection, by id."""

    def __init__(self, launcher: ProcessLauncher, base_env: dict[str, str]) -> None:
        self.launcher = launcher
        self.base_env = base_env
        self._terminals: dict[str, Terminal] = {}

    def ids(self) -> list[str]:
        """Ids of the terminals not released yet."""
        return list(self._terminals)

    async def create(
        self, command: str, args: list[str], env: dict[str, str], cwd: str | None, limit: int | None
    ) -> str:
        """Start `command args...` (through `/bin/sh -c` when no args are given: a command line)."""
        if len(self._terminals) >= MAX_TERMINALS:
            raise RequestError.internal_error({"error": f"at most {MAX_TERMINALS} terminals may be open"})
        argv = [command, *args] if args else ["/bin/sh", "-c", command]
        try:
            process = await self.launcher.launch(argv, env={**self.base_env, **env}, cwd=cwd or "/")
        except OSError as exc:
            raise RequestError.internal_error({"command": command, "error": str(exc)}) from exc
        terminal_id = f"term-{uuid.uuid4().hex[:12]}"
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            process.stdin.close()
        self._terminals[terminal_id] = Terminal(process, limit or DEFAULT_OUTPUT_LIMIT)
        return terminal_id

    def get(self, terminal_id: str) -> Terminal:
        """The terminal with this id; a protocol error if there is none."""
        terminal = self._terminals.get(terminal_id)
        if terminal is None:
            raise RequestError.invalid_params({"terminalId": terminal_id, "error": "no such terminal"})
        return terminal

    async def release(self, terminal_id: str) -> None:
        """Kill the command if it still runs and forget the terminal."""
        terminal = self._terminals.pop(terminal_id, None)
        if terminal is not None:
            await terminal.close()
