"""`/mcp`: the episode's tools over MCP (JSON-RPC 2.0), for the `mcp` SDK's clients and OpenEnv's.

Speaks MCP Streamable HTTP with JSON answers: `initialize` opens a session — an episode of the task named by
the URL's `?task=` (or `?seed=`) — and answers with an `Mcp-Session-Id` header the client sends back;
`tools/list` and `tools/call` follow; `DELETE /mcp` ends the session. OpenEnv's own extension methods work
too (`openenv/session/create` with `params.session_id` on later calls, `openenv/session/close`), as does the
`mcp` message type on a `/ws` session (its own episode). The reserved names `reset`, `step`, `state` and
`close` are never tools: a client can act in an episode but never reset or score it through a tool.
"""

from __future__ import annotations

from typing import Any

from evsys import __version__
from evsys.agent.harness.adapter import RESERVED_TOOL_NAMES
from evsys.agent.tools import SandboxTools
from evsys.engine.episodes.protocol import (
    CallToolAction,
    ErrorCode,
    ResetParams,
    ServeError,
)
from evsys.engine.episodes.service import ServeService, Session

DEFAULT_PROTOCOL_VERSION = "2025-06-18"
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = (
    -32700,
    -32600,
    -32601,
    -32602,
    -32603,
)
SERVER_ERROR = -32000


def mcp_tools(session: Session | None = None, *, harness_mode: bool = False) -> list[dict[str, Any]]:
    """The tools clients see: the session's episode's tools (the built-in ones, then the task's MCP tools;
    the built-in ones without an episode) in MCP's shape (only `submit` in harness mode, where the harness
    brings its own), never a reserved name."""
    tools = []
    for schema in session.tool_schemas() if session is not None else SandboxTools.schemas():
        fn = schema["function"]
        if fn["name"] in RESERVED_TOOL_NAMES or (harness_mode and fn["name"] != "submit"):
            continue
        tools.append({"name": fn["name"], "description": fn["description"], "inputSchema": fn["parameters"]})
    return tools


def rpc_error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC error response."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def rpc_result(request_id: Any, result: Any) -> dict[str, Any]:
    """A JSON-RPC success response."""
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


class McpDispatcher:
    """Answers one JSON-RPC message for a session (or opens one)."""

    def __init__(self, service: ServeService) -> None:
        self.service = service

    def find(self, session_id: str | None) -> Session | None:
        """The MCP session with this id (never another transport's session)."""
        session = self.service.sessions.get(session_id or "")
        return session if session is not None and session.kind == "mcp" else None

    async def open(self, params: ResetParams) -> Session:
        """A new MCP session with its episode started."""
        session = self.service.open_session("mcp")
        try:
            async with session.lock:
                await session.reset(params)
        except BaseException:
            session.close("the episode could not start")
            raise
        return session

    async def dispatch(
        self, message: Any, session: Session | None, reset: ResetParams | None = None
    ) -> tuple[dict[str, Any] | None, Session | None]:
        """The response to `message` (None for a notification) and the session it opened, if any."""
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or "method" not in message:
            return rpc_error(None, INVALID_REQUEST, "not a JSON-RPC 2.0 request"), None
        request_id, method = message.get("id"), message["method"]
        params = message.get("params") or {}
        if not isinstance(params, dict) or not isinstance(method, str):
            return rpc_error(request_id, INVALID_PARAMS, "params must be an object, method a string"), None
        if "id" not in message:  # a notification: nothing to answer
            return None, None
        try:
            return await self._method(request_id, method, params, session, reset or ResetParams())
        except ServeError as exc:
            return rpc_error(request_id, SERVER_ERROR, str(exc), exc.payload()), None

    async def _method(
        self,
        request_id: Any,
        method: str,
        params: dict[str, Any],
        session: Session | None,
        reset: ResetParams,
    ) -> tuple[dict[str, Any], Session | None]:
        if method == "initialize":
            opened = await self.open(reset)
            return rpc_result(request_id, self._initialize_result(params, opened)), opened
        if method == "openenv/session/create":
            opened = await self.open(ResetParams.model_validate(params))
            return rpc_result(request_id, {"session_id": opened.id}), opened
        if method == "ping":
            return rpc_result(request_id, {}), None
        if method == "tools/list":
            target = session or self.find(params.get("session_id"))
            return rpc_result(request_id, {"tools": mcp_tools(target)}), None
        if method == "openenv/session/close":
            target = self.find(params.get("session_id"))
            if target is None:
                return rpc_error(request_id, INVALID_PARAMS, "unknown session_id"), None
            target.close("the client closed the session")
            return rpc_result(request_id, {"session_id": target.id, "closed": True}), None
        if method == "tools/call":
            return await self._call(request_id, params, session), None
        return rpc_error(request_id, METHOD_NOT_FOUND, f"method not found: {method}"), None

    def _initialize_result(self, params: dict[str, Any], session: Session) -> dict[str, Any]:
        episode = session.episode
        instruction = episode.task.task.instruction if episode is not None else ""
        version = params.get("protocolVersion")
        return {
            "protocolVersion": version if isinstance(version, str) else DEFAULT_PROTOCOL_VERSION,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "evsys", "version": __version__},
            "instructions": instruction,
        }

    async def _call(self, request_id: Any, params: dict[str, Any], session: Session | None) -> dict[str, Any]:
        session = session or self.find(params.get("session_id"))
        if session is None:
            return rpc_error(
                request_id, INVALID_REQUEST, "no session: initialize first (send its Mcp-Session-Id back)"
            )
        name, arguments = params.get("name"), params.get("arguments") or {}
        if not isinstance(name, str) or not name or not isinstance(arguments, dict):
            return rpc_error(request_id, INVALID_PARAMS, "tools/call needs a 'name' and object 'arguments'")
        if name not in {t["name"] for t in mcp_tools(session)}:
            return rpc_error(request_id, INVALID_PARAMS, f"unknown tool: {name}")
        session.touch()
        async with session.lock:
            observation, reward, done = await session.step(
                CallToolAction(tool_name=name, arguments=arguments)
            )
        session.touch()
        if observation.error is not None:
            text, is_error = observation.error.message, True
        else:
            result = observation.result or {}
            text, is_error = str(result.get("data", "")), bool(result.get("is_error"))
        meta: dict[str, Any] = {"evsys/done": done}
        if done:
            text += f"\n[episode over: reward {reward}]"
            meta.update({"evsys/reward": reward, "evsys/rewards": observation.metadata.get("rewards")})
        content = [{"type": "text", "text": text}]
        # `data`: the plain result OpenEnv's MCP client returns from call_tool (MCP clients read `content`)
        result = {"content": content, "isError": is_error, "data": text, "_meta": meta}
        return rpc_result(request_id, result)


def no_session_error() -> ServeError:
    """The error for a request naming a session that does not exist (or is not the caller's)."""
    return ServeError(ErrorCode.SESSION_ERROR, "unknown or expired Mcp-Session-Id: initialize again")
