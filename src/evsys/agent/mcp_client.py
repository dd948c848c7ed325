"""A task's MCP servers as loop-agent tools: an MCP client (the official `mcp` SDK) per server.

Each `stdio` server of the task's `[environment] mcp_servers` is started inside the trial's sandbox (as the
sandbox's default user, in the task's working directory) and spoken to over its stdin/stdout, so it sees
exactly what the agent sees and the task's network mode applies to it. An HTTP server (`streamable-http`,
`sse`) is reached the same way through a stdlib relay started inside the sandbox (evsys.agent.mcp_relay): the
requests leave from the sandbox's network namespace. Every server's tools are offered to the model as
`mcp__<server>__<tool>` (the names Claude Code gives them) beside the loop agent's own. A call goes to the
server with `tools/call`; its text content becomes the observation, an error result or a failed call an error
observation."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from evsys.agent.tools import ToolOutcome, clip
from evsys.records import ToolCall
from evsys.sandbox.base import Sandbox, StreamingProcess
from evsys.task.models import McpServerConfig

log = logging.getLogger(__name__)

TOOL_PREFIX = "mcp__"
SANDBOX_PYTHON = "/usr/bin/python3"  # what runs the relay (the harness forwarder needs it too)
START_TIMEOUT = 60.0
STDERR_KEEP = 4000


def exposed_name(server: str, tool: str) -> str:
    """The name the model calls a server's tool by: `mcp__<server>__<tool>`."""
    return f"{TOOL_PREFIX}{server}__{tool}"


@functools.cache
def relay_source() -> str:
    """The source of the in-sandbox HTTP relay (evsys.agent.mcp_relay), run with `python3 -I -c`."""
    from evsys.agent import mcp_relay

    return Path(mcp_relay.__file__).read_text()


def server_argv(server: McpServerConfig) -> list[str]:
    """What to start in the sandbox for `server`: its own command, or the relay to its URL (the headers'
    `${VAR}`s resolved from evsys's environment)."""
    if server.transport == "stdio":
        return [server.command or "", *server.args]
    headers = json.dumps(server.resolved_headers(os.environ))
    return [SANDBOX_PYTHON, "-I", "-c", relay_source(), server.transport, server.url or "", headers]


def _missing_extra() -> RuntimeError:
    return RuntimeError("task MCP servers need the `mcp` package: pip install 'evsys[harness]'")


@contextlib.asynccontextmanager
async def process_streams(process: StreamingProcess) -> AsyncIterator[tuple[Any, Any]]:
    """The MCP SDK's (read, write) stream pair over a sandbox process's stdout and stdin (JSON lines)."""
    import anyio
    import mcp_types
    from mcp.shared.message import SessionMessage

    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_lines() -> None:
        async with read_writer:
            while line := await process.stdout.readline():
                if not line.strip():
                    continue
                try:
                    parsed = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except ValueError as exc:
                    await read_writer.send(exc)
                    continue
                await read_writer.send(SessionMessage(parsed))

    async def write_lines() -> None:
        async with write_reader:
            async for message in write_reader:
                body = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                process.stdin.write(body.encode() + b"\n")
                await process.stdin.drain()

    async with anyio.create_task_group() as group:
        group.start_soon(read_lines)
        group.start_soon(write_lines)
        try:
            yield read_stream, write_stream
        finally:
            group.cancel_scope.cancel()


class TaskMcpTools:
    """The tools of a task's stdio MCP servers, served from inside one sandbox (see the module docstring).

    Use as `async with TaskMcpTools(servers, sandbox, workdir=...) as mcp:` in the task that runs the agent
    (the SDK's sessions must be entered and left in one task)."""

    def __init__(
        self, servers: list[McpServerConfig], sandbox: Sandbox, *, workdir: str, call_timeout: float = 120.0
    ) -> None:
        self.servers = servers
        self.sandbox = sandbox
        self.workdir = workdir
        self.call_timeout = call_timeout
        self._routes: dict[str, tuple[Any, str]] = {}  # exposed name -> (client session, tool name)
        self._schemas: list[dict[str, Any]] = []
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> TaskMcpTools:
        try:
            for server in self.servers:
                await self._connect(server)
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def _connect(self, server: McpServerConfig) -> None:
        try:
            import anyio
            from mcp.client.session import ClientSession
        except ImportError as exc:
            raise _missing_extra() from exc
        argv = server_argv(server)
        process = await self.sandbox.spawn(argv, cwd=self.workdir)
        self._stack.push_async_callback(process.kill)
        streams = await self._stack.enter_async_context(process_streams(process))
        session = await self._stack.enter_async_context(ClientSession(*streams))
        try:
            with anyio.fail_after(START_TIMEOUT):
                await session.initialize()
                listed = await session.list_tools()
        except Exception as exc:
            stderr = await _stderr_tail(process)
            raise RuntimeError(
                f"task MCP server {server.name!r} ({server.url or ' '.join(argv)}) did not start: {exc!r}"
                + (f"; its stderr: {stderr}" if stderr else "")
            ) from exc
        for tool in listed.tools:
            name = exposed_name(server.name, tool.name)
            self._routes[name] = (session, tool.name)
            function = {"name": name, "description": tool.description or "", "parameters": tool.input_schema}
            self._schemas.append({"type": "function", "function": function})

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI-shape schemas of every server's tools (under their exposed names)."""
        return list(self._schemas)

    def __contains__(self, name: object) -> bool:
        return name in self._routes

    async def call(self, call: ToolCall, max_chars: int) -> ToolOutcome:
        """Run one tool call on its server; failures become error outcomes (the model sees them)."""
        import anyio
        import mcp_types

        if call.parse_error is not None:
            problem = f"error: could not parse your tool call: {call.parse_error}"
            return ToolOutcome(content=problem, error_kind="parse")
        session, tool = self._routes[call.function_name]
        try:
            with anyio.fail_after(self.call_timeout):
                result = await session.call_tool(tool, dict(call.arguments))
        except Exception as exc:
            return ToolOutcome(content=f"error: {call.function_name} failed: {exc}", error_kind="execution")
        if not isinstance(result, mcp_types.CallToolResult):
            problem = f"error: {call.function_name}: the server asked for input, which evsys cannot give"
            return ToolOutcome(content=problem, error_kind="execution")
        parts = [p.text for p in result.content if isinstance(p, mcp_types.TextContent)]
        text = clip("\n".join(parts), max_chars)
        if result.is_error:
            return ToolOutcome(content=f"error: {text}", error_kind="execution")
        return ToolOutcome(content=text or "[no output]")


async def _stderr_tail(process: StreamingProcess) -> str:
    with contextlib.suppress(Exception):
        await process.kill()
        data = await process.stderr.read()
        return data.decode("utf-8", "replace").strip()[-STDERR_KEEP:]
    return ""
