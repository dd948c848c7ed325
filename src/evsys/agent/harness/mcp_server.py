"""The environment's tools as an MCP server, served per proxy session at `/mcp` (RFC 005 tool injection).

`serve_tools(session, adapter.injected_tools, handler)` attaches a `ToolServer` to a `ProxySession`. The
proxy then answers MCP Streamable HTTP at `/mcp` on its TCP listener and on the session's own unix socket,
with the same authentication as its model endpoints (`Authorization: Bearer <session key>`; on the session's
socket only that session's key). The server lists exactly the injected tools under their exposed names,
routes each call to `handler(<environment tool name>, arguments)` after validating the arguments against the
tool's input schema, and refuses every other name (reward and lifecycle tools are never served:
`serve_tools` rejects them). Each call is recorded on the session (`session.tool_calls`).

The MCP transport is the official `mcp` SDK's low-level `Server` behind its Streamable HTTP session manager in
stateless JSON mode: no per-connection state to leak between thousands of trials, and a plain JSON-RPC POST
(initialize, tools/list, tools/call) works from any client."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from evsys.agent.harness.adapter import RESERVED_TOOL_NAMES, McpEndpoint
from evsys.agent.harness.config import InjectedTool, ModelEndpoint
from evsys.agent.tools import clip, truncation_note
from evsys.records import ExecResult

if TYPE_CHECKING:
    from evsys.model.proxy.session import ProxySession

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
SERVER_NAME = "evsys-env"
_EXPOSED_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
MAX_TOOL_TEXT_CHARS = 100_000  # a tool's text beyond this keeps its head and tail, with a marker between


class ToolOutput(BaseModel):
    """What an environment tool returned: text for the harness, and whether it is an error result."""

    text: str = Field(description="The tool's output as the harness's model will see it.")
    is_error: bool = Field(False, description="True when the tool failed (the model sees an error result).")

    @classmethod
    def from_exec(cls, result: ExecResult) -> ToolOutput:
        """A sandbox command's result as the model should see it: stdout, then stderr, each with a marker
        where the sandbox dropped its middle, then how large a cut stream was (kept when the server clips
        the text), then how it ended unless it exited 0."""
        parts = [result.stdout_shown.rstrip("\n")]
        if result.stderr_bytes or result.stderr_truncated:
            parts.append(result.stderr_shown.rstrip("\n"))
        if result.timed_out:
            parts.append("[command timed out]")
        elif result.exit_code != 0:
            parts.append(f"[exit code {result.exit_code}]")
        text = ("\n".join(p for p in parts if p) + truncation_note(result)).lstrip("\n") or "[no output]"
        return cls(text=text, is_error=not result.ok)


ToolHandler = Callable[[str, dict[str, Any]], Awaitable[ToolOutput]]
"""Runs one environment tool: `(environment tool name, validated arguments) -> ToolOutput`."""


def _missing_extra() -> RuntimeError:
    return RuntimeError(
        "serving environment tools over MCP needs the `mcp` package: pip install 'evsys[harness]'"
    )


def mcp_endpoint_for(endpoint: ModelEndpoint, server_name: str = SERVER_NAME) -> McpEndpoint:
    """The MCP endpoint of a harness's proxy session: `<base_url>/mcp`, the session key as bearer token."""
    return McpEndpoint(
        url=endpoint.base_url.rstrip("/") + MCP_PATH,
        headers={"Authorization": f"Bearer {endpoint.api_key}"},
        server_name=server_name,
    )


def _checked_tools(injected_tools: list[InjectedTool]) -> dict[str, InjectedTool]:
    """Exposed name -> tool; refuses reward/lifecycle/reserved tools, bad or duplicate names, bad schemas."""
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    tools: dict[str, InjectedTool] = {}
    for injected in injected_tools:
        tool, exposed = injected.tool, injected.exposed_name
        if tool.kind != "domain" or tool.name.lower() in RESERVED_TOOL_NAMES:
            raise ValueError(
                f"tool {tool.name!r} ({tool.kind}) must never be served to a harness: only domain tools are"
            )
        if exposed.lower() in RESERVED_TOOL_NAMES or not _EXPOSED_NAME.match(exposed):
            raise ValueError(
                f"tool {tool.name!r}: exposed name {exposed!r} is reserved or not a valid tool name"
            )
        if exposed in tools:
            raise ValueError(f"two tools are exposed as {exposed!r}")
        if tool.input_schema.get("type") != "object":
            raise ValueError(f'tool {tool.name!r}: input_schema must have "type": "object" at its root')
        try:
            validator_for(tool.input_schema).check_schema(tool.input_schema)
        except SchemaError as exc:
            raise ValueError(
                f"tool {tool.name!r}: input_schema is not a valid JSON Schema: {exc.message}"
            ) from exc
        tools[exposed] = injected
    return tools


def _argument_problem(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """A one-line description of why `arguments` do not match `schema`, or None when they do."""
    from jsonschema.exceptions import best_match
    from jsonschema.validators import validator_for

    error = best_match(validator_for(schema)(schema).iter_errors(arguments))
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path)
    return f"{error.message} (at {where!r})" if where else error.message


class ToolServer:
    """The MCP server of one proxy session: lists its injected tools, validates, routes and records calls.

    An ASGI app (the proxy calls it for authorised `/mcp` requests of its session); `call()` is the same
    routing without HTTP. Started lazily on the first request, stopped by `aclose()` (the proxy does that
    when the session closes)."""

    def __init__(
        self,
        session: ProxySession,
        injected_tools: list[InjectedTool],
        handler: ToolHandler,
        *,
        name: str = SERVER_NAME,
    ) -> None:
        try:
            import mcp_types
            from mcp.server import Server
            from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
            from mcp.server.transport_security import TransportSecuritySettings
        except ImportError as exc:
            raise _missing_extra() from exc
        from evsys.util.version import __version__

        self.session = session
        self.tools = _checked_tools(injected_tools)
        self.handler = handler
        self._types = mcp_types
        self.server = Server(
            name, version=__version__, on_list_tools=self._on_list_tools, on_call_tool=self._on_call_tool
        )
        # The proxy checks the session key before a request gets here, so DNS-rebinding protection (Host and
        # Origin allow-lists, for unauthenticated localhost servers) would only refuse forwarded requests.
        self.manager = StreamableHTTPSessionManager(
            self.server,
            stateless=True,
            json_response=True,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()

    def tool_mapping(self) -> dict[str, str]:
        """Exposed name -> the environment's own tool name."""
        return {exposed: injected.tool.name for exposed, injected in self.tools.items()}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Serve one authorised MCP HTTP request: POST JSON-RPC. GET (a server-to-client event stream) and
        DELETE (end an MCP session) get 405: a stateless server has neither, as the transport allows."""
        if scope.get("method") != "POST":
            from starlette.responses import PlainTextResponse

            refusal = PlainTextResponse("405: this MCP endpoint accepts POST only", 405, {"Allow": "POST"})
            await refusal(scope, receive, send)
            return
        if self._stop.is_set():
            raise RuntimeError("the session's MCP server is closed")
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="evsys-mcp-server")
        await self._ready.wait()
        await self.manager.handle_request(scope, receive, send)

    async def _run(self) -> None:
        try:
            async with self.manager.run():
                self._ready.set()
                await self._stop.wait()
        except Exception:
            log.exception("the MCP server of session %r failed", self.session)
            raise
        finally:
            self._ready.set()  # never leave a request waiting for a server that is gone

    async def aclose(self) -> None:
        """Stop serving (idempotent); requests in flight are cancelled."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._task

    # -- MCP handlers ---------------------------------------------------------------------------------------

    async def _on_list_tools(self, ctx: Any, params: Any) -> Any:
        types = self._types
        listed = [
            types.Tool(
                name=exposed,
                description=injected.tool.description or None,
                input_schema=injected.tool.input_schema,
            )
            for exposed, injected in self.tools.items()
        ]
        return types.ListToolsResult(tools=listed)

    async def _on_call_tool(self, ctx: Any, params: Any) -> Any:
        from mcp.shared.exceptions import MCPError

        arguments = params.arguments or {}
        if params.name not in self.tools:
            message = f"unknown tool {params.name!r}: this session serves {sorted(self.tools) or 'no tools'}"
            self.session.record_tool_call(params.name, "", arguments, error=message, duration_s=0.0)
            raise MCPError(self._types.INVALID_PARAMS, message)
        output = await self.call(params.name, arguments)
        return self._types.CallToolResult(
            content=[self._types.TextContent(text=output.text)], is_error=output.is_error
        )

    async def call(self, exposed_name: str, arguments: dict[str, Any]) -> ToolOutput:
        """Validate, route and record one call of a served tool (an error result, never an exception)."""
        injected = self.tools.get(exposed_name)
        if injected is None:
            raise KeyError(f"tool {exposed_name!r} is not served by this session")
        started = time.perf_counter()
        problem = _argument_problem(injected.tool.input_schema, arguments)
        error = None
        if problem is not None:
            error = f"invalid arguments for tool {exposed_name!r}: {problem}"
            output = ToolOutput(text=error, is_error=True)
        else:
            output, error = await self._run_handler(injected.tool.name, arguments)
        if len(output.text) > MAX_TOOL_TEXT_CHARS:
            output = output.model_copy(update={"text": clip(output.text, MAX_TOOL_TEXT_CHARS)})
        self.session.record_tool_call(
            exposed_name,
            injected.tool.name,
            arguments,
            output=output.text,
            is_error=output.is_error,
            error=error,
            duration_s=time.perf_counter() - started,
        )
        return output

    async def _run_handler(self, tool_name: str, arguments: dict[str, Any]) -> tuple[ToolOutput, str | None]:
        """The handler's output, or an error result naming what went wrong (second value: that reason)."""
        try:
            output = await self.handler(tool_name, dict(arguments))
        except Exception as exc:
            log.warning("environment tool %r failed", tool_name, exc_info=True)
            error = f"tool {tool_name!r} failed: {type(exc).__name__}: {exc}"
            return ToolOutput(text=error, is_error=True), error
        if not isinstance(output, ToolOutput):
            error = f"tool {tool_name!r}: the handler returned {type(output).__name__}, not a ToolOutput"
            return ToolOutput(text=error, is_error=True), error
        return output, None


def serve_tools(
    session: ProxySession,
    injected_tools: list[InjectedTool],
    handler: ToolHandler,
    *,
    name: str = SERVER_NAME,
) -> ToolServer:
    """Serve `injected_tools` (normally `adapter.injected_tools`) to `session`'s harness at `/mcp`.

    Replaces (and closes) a tool server attached earlier. Raises ValueError for a closed session and for tools
    that must not be served (reward, lifecycle, reserved names), duplicate exposed names or bad schemas."""
    if session.closed:
        raise ValueError("cannot serve tools to a closed proxy session")
    server = ToolServer(session, injected_tools, handler, name=name)
    previous, session.mcp_app = session.mcp_app, server
    if isinstance(previous, ToolServer) and previous._task is not None:
        previous._stop.set()  # its task (on the running loop) exits on its own
    return server
