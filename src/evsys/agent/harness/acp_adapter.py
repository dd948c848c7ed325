"""`AcpHarnessAdapter`: any harness that speaks the Agent Client Protocol (ACP) over stdio, driven with the
official Python SDK (`agent-client-protocol`).

`start()` calls `prepare()` (config files), launches `config.command` where the launcher puts it (the trial's
sandbox), sends `initialize` (the client offers file read/write and terminals, all served inside the sandbox
by `SandboxAcpClient`), `authenticate` when the adapter names a method, and `session/new` with the task's
working directory and, when environment tools were injected, the evsys MCP server (HTTP, with its bearer
header). The one ACP session lives as long as the adapter: every `send_message` is one `session/prompt` in
it, so turns see the earlier ones (multi-turn `evsys serve` harness episodes keep one session).

A turn's events are the session updates (text, thoughts, tool calls and results, permission decisions),
the proxy session's model calls (LLM_REQUEST / LLM_RESPONSE) and TURN_COMPLETE when the prompt returns: status
"ok" with the ACP `stop_reason` (`end_turn`, `max_tokens`, `max_turn_requests`, `refusal`), "error" for a
`cancelled` turn, a JSON-RPC error, the harness exiting (`crash`) or running past `session_timeout_s`
(`timeout`: the prompt is cancelled and the harness killed; the adapter then refuses further turns).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from acp import PROTOCOL_VERSION, connect_to_agent, text_block
from acp.schema import (
    ClientCapabilities,
    FileSystemCapabilities,
    HttpHeader,
    HttpMcpServer,
    Implementation,
    McpServerStdio,
    SseMcpServer,
)

from evsys.agent.harness.acp_client import SandboxAcpClient
from evsys.agent.harness.acp_steps import MAX_KEPT_EVENTS, events_to_steps
from evsys.agent.harness.adapter import HarnessStartError, HarnessStateError
from evsys.agent.harness.config import HarnessConfig
from evsys.agent.harness.events import HarnessEvent, HarnessEventType
from evsys.agent.harness.process import HarnessProcess
from evsys.agent.harness.turns import ProcessHarnessAdapter, describe_exit, json_object
from evsys.records import Step

CLIENT_INFO = Implementation(name="evsys", title="evsys", version="1")
ERROR_STOP_REASONS = frozenset({"cancelled"})


class ProcessTransport:
    """The SDK's message `Transport` over a harness process's stdin/stdout (newline-delimited JSON-RPC), for
    processes whose stdin is not an `asyncio.StreamWriter` (a sandbox's `spawn`). Lines that are not JSON
    objects (a harness logging to stdout) are skipped."""

    def __init__(self, process: HarnessProcess) -> None:
        self.process = process

    async def send(self, message: dict[str, Any]) -> None:
        """Write one message as a line."""
        self.process.stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        await self.process.stdin.drain()

    async def receive(self) -> dict[str, Any] | None:
        """The next message; None at the end of stdout."""
        while line := await self.process.stdout.readline():
            message = json_object(line)
            if message is not None:
                return message
        return None

    async def close(self) -> None:
        """Close the harness's stdin."""
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            self.process.stdin.close()


class AcpHarnessAdapter(ProcessHarnessAdapter):
    """One long-lived ACP harness process and one ACP session; one `session/prompt` per turn."""

    auth_method: str | None = None  # an `authenticate` method id to call after `initialize`, if any

    def __init__(self, config: HarnessConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.client: SandboxAcpClient | None = None
        self.conn: Any = None
        self.session_id: str | None = None
        self.agent_info: dict[str, Any] = {}
        self.stopped = False
        self._queue: asyncio.Queue[HarnessEvent] | None = None
        self.history: list[tuple[str, list[HarnessEvent]]] = []  # (prompt, its session-update events)
        self._kept = 0

    # -- hooks ---------------------------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Before the harness starts: write its configuration files (via `self.launcher.write_file`), start
        what it needs beside it."""

    def launch_argv(self) -> list[str]:
        """The argv of the ACP harness process (`config.command` by default)."""
        return list(self.config.command)

    def render_mcp_config(self) -> bytes | None:
        """Nothing to write: ACP passes MCP servers in `session/new`."""
        return None

    def mcp_servers(self) -> list[HttpMcpServer | SseMcpServer | McpServerStdio]:
        """The MCP servers for `session/new`: the evsys server (when environment tools were injected) and the
        task's own (`mcp_server_entries`)."""
        servers: list[HttpMcpServer | SseMcpServer | McpServerStdio] = []
        for name, entry in self.mcp_server_entries().items():
            if entry["type"] == "stdio":
                servers.append(
                    McpServerStdio(name=name, command=entry["command"], args=entry["args"], env=[])
                )
                continue
            headers = [HttpHeader(name=k, value=v) for k, v in entry["headers"].items()]
            kind = HttpMcpServer if entry["type"] == "http" else SseMcpServer
            servers.append(kind(type=entry["type"], name=name, url=entry["url"], headers=headers))
        return servers

    # -- lifecycle -----------------------------------------------------------------------------------------

    def _emit(self, event: HarnessEvent) -> None:
        if self._queue is None:
            return
        self._queue.put_nowait(event)
        if self.history and self._kept < MAX_KEPT_EVENTS:
            self.history[-1][1].append(event)
            self._kept += 1

    async def native_steps(self) -> list[Step]:
        """The session as the harness reported it over ACP (prompts, text, thoughts, tool calls, results)."""
        return events_to_steps(self.history)

    async def start(self) -> None:
        """Prepare, launch the harness, initialize ACP and open the session; HarnessStartError on failure."""
        if self.started:
            raise HarnessStateError(f"harness {self.config.name!r} is already started")
        self.started = True
        name = self.config.name
        try:
            await self.prepare()
            process = await self.launch(self.launch_argv())
        except BaseException as exc:
            await self.stop()
            if isinstance(exc, OSError):
                raise HarnessStartError(f"harness {name!r} could not be started: {exc}") from exc
            raise
        self.client = SandboxAcpClient(
            self.launcher, self._emit, lambda: self.turns, base_env=self.environment()
        )
        self.conn = connect_to_agent(self.client, ProcessTransport(process))
        try:
            await asyncio.wait_for(self._open_session(), self.config.startup_timeout_s)
        except Exception as exc:
            await self.drain_stderr()
            code = process.returncode
            reason = (
                describe_exit(code) if code is not None else f"did not open an ACP session ({_describe(exc)})"
            )
            await self.stop()
            raise HarnessStartError(f"harness {name!r} {reason}{self.stderr_note()}") from exc

    async def _open_session(self) -> None:
        fs = FileSystemCapabilities(read_text_file=True, write_text_file=True)
        init = await self.conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(fs=fs, terminal=True),
            client_info=CLIENT_INFO,
        )
        self.agent_info = init.model_dump(mode="json", by_alias=True, exclude_none=True)
        if self.auth_method is not None:
            await self.conn.authenticate(method_id=self.auth_method)
        session = await self.conn.new_session(
            cwd=self.config.working_directory, mcp_servers=self.mcp_servers()
        )
        self.session_id = session.session_id

    async def is_alive(self) -> bool:
        """Whether the harness process is running."""
        return self.process is not None and self.process.returncode is None and not self.stopped

    async def stop(self) -> None:
        """Close the connection, kill every terminal and the harness's process tree (idempotent)."""
        self.stopped = True
        if self.client is not None:
            await self.client.close()
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.conn.close(), 5)
        await self._kill()

    # -- turns ---------------------------------------------------------------------------------------------

    async def send_message_streaming(self, message: str) -> AsyncIterator[HarnessEvent]:
        """One `session/prompt`; events end with TURN_COMPLETE (status "ok" or "error")."""
        if self.session_id is None or self.stopped:
            state = "stopped" if self.stopped else "not started"
            raise HarnessStateError(f"harness {self.config.name!r} is {state}: no turn can run")
        self._claim_turn()
        async with self._turn_lock:
            self.turns += 1
            turn = self.turns
            queue: asyncio.Queue[HarnessEvent] = asyncio.Queue()
            self._queue = queue
            self.history.append((message, []))
            runner = asyncio.create_task(self._prompt(message, turn, queue))

            async def abandon() -> None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.conn.cancel(session_id=self.session_id), 2)
                runner.cancel()
                await self.stop()

            try:
                with self._proxy_events(queue, lambda: turn):
                    async for event in self._until_turn_complete(queue, abandon, turn):
                        yield event
            finally:
                runner.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await runner
                self._queue = None

    async def _prompt(self, message: str, turn: int, queue: asyncio.Queue[HarnessEvent]) -> None:
        """Send the prompt and end the turn by its outcome, or by the harness exiting first."""
        assert self.process is not None
        prompt = asyncio.ensure_future(
            self.conn.prompt(session_id=self.session_id, prompt=[text_block(message)])
        )
        exited = asyncio.ensure_future(self.process.wait())
        try:
            await asyncio.wait({prompt, exited}, return_when=asyncio.FIRST_COMPLETED)
            if not prompt.done():
                await self.drain_stderr()
                exit_text = describe_exit(self.process.returncode)
                detail = f"the harness {exit_text} during the turn{self.stderr_note()}"
                for event in self._failure("crash", detail, turn):
                    queue.put_nowait(event)
                return
            try:
                response = prompt.result()
            except Exception as exc:
                for event in self._failure("crash", f"session/prompt failed: {_describe(exc)}", turn):
                    queue.put_nowait(event)
                return
            reason = str(response.stop_reason)
            data: dict[str, Any] = {"status": "ok", "stop_reason": reason}
            if response.usage is not None:
                data["usage"] = response.usage.model_dump(mode="json", exclude_none=True)
            if reason in ERROR_STOP_REASONS:
                data |= {"status": "error", "error": f"harness {self.config.name!r}: the turn ended {reason}"}
            queue.put_nowait(HarnessEvent(type=HarnessEventType.TURN_COMPLETE, data=data, turn=turn))
        finally:
            for future in (prompt, exited):
                future.cancel()


def _describe(exc: BaseException) -> str:
    """A short description of an exception (JSON-RPC errors carry their message and data)."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"
