"""The proxy's error replies, each in the shape its clients read: OpenAI's error envelope (chat completions,
Responses), Anthropic's, and JSON-RPC errors for `/mcp`."""

from __future__ import annotations

from typing import Any

from evsys.model.errors import (
    ContextOverflowError,
    ModelError,
    RetryableModelError,
    UnknownModelError,
)
from evsys.model.openai_wire import error_body
from evsys.model.proxy import anthropic_dialect, google_dialect
from evsys.model.proxy.session import Dialect
from evsys.util.bodylimit import Scope

UNKNOWN_KEY = "invalid API key: this key does not belong to an open evsys proxy session on this endpoint"
NO_TOOLS = "this evsys proxy session serves no environment tools (none were injected before the harness)"
_ANTHROPIC_KINDS = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    408: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}
_OPENAI_KINDS = {s: "invalid_request_error" for s in (400, 401, 404, 408, 413)}
_RPC_CODES = {401: -32001, 404: -32601}


def mcp_error(status: int, message: str) -> Any:
    """A JSON-RPC error response (no request id), the shape MCP clients expect from `/mcp`."""
    from starlette.responses import JSONResponse

    code = _RPC_CODES.get(status, -32600)
    return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}, status)


def status_for(exc: Exception) -> int:
    """The HTTP status a model client's exception is answered with."""
    if isinstance(exc, ContextOverflowError):
        return 400
    if isinstance(exc, UnknownModelError):
        return 404
    if isinstance(exc, RetryableModelError):
        return 429 if exc.status_code == 429 else 503
    if isinstance(exc, ModelError):
        return 502 if exc.status_code in (401, 403) else (exc.status_code or 500)
    return 500


def error_response(dialect: Dialect, status: int, message: str) -> Any:
    """An error response in `dialect`'s shape."""
    from starlette.responses import JSONResponse

    if dialect == "anthropic":
        body = anthropic_dialect.error_body(message, _ANTHROPIC_KINDS.get(status, "api_error"))
    elif dialect == "google":
        body = google_dialect.error_body(status, message)
    else:
        code = "invalid_api_key" if status == 401 else None
        body = error_body(message, _OPENAI_KINDS.get(status, "server_error"), code)  # Responses API too
    return JSONResponse(body, status_code=status)


def refusal(scope: Scope, status: int, reason: str) -> Any:
    """A request refused before its body is parsed (401 unknown key, 413 too large, 408 stalled, 429 over
    its session's budget), in the shape the endpoint's clients read; the connection is closed after it, and
    a 429 says when to retry."""
    path = scope.get("path", "")
    if path == "/mcp":
        response = mcp_error(status, reason)
    else:
        response = error_response(_dialect_of(path), status, reason)
    response.headers["connection"] = "close"
    if status == 429:
        response.headers["retry-after"] = "1"
    return response


def _dialect_of(path: str) -> Dialect:
    if path == "/v1/messages":
        return "anthropic"
    return "google" if "/models/" in path else "openai"
