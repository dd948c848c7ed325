"""`ModelProxy`: an OpenAI-, Anthropic- and Google-compatible HTTP endpoint in front of any `ModelClient`,
recording calls.

Every trial gets a session (`open_session`) whose key the harness uses as its API key (OpenAI:
`Authorization: Bearer <key>`; Anthropic: `x-api-key: <key>`, Bearer accepted too; Google: `x-goog-api-key`
or `?key=`). A request with an unknown or closed key is refused with 401 in the dialect's error shape. A
session may also get its own unix socket (`open_session(uds=...)`): requests arriving there are accepted
only with that session's key, so a harness in a sandbox that can see only its own socket cannot use another
session even if it learns that session's key.

Endpoints: `POST /v1/chat/completions`, `POST /v1/messages`, `POST /v1/responses`, `POST
/v1beta/models/<model>:generateContent` (and `:streamGenerateContent`, `:countTokens`), `GET /v1/models`,
`GET /health` (no key needed), and `/mcp` (MCP Streamable HTTP: the environment tools attached to the
session with `evsys.agent.harness.mcp_server.serve_tools`; same key rules). The job's generation flags
(`CallDefaults`) fill the temperature and max tokens a request leaves out, and past `--max-turns` calls a
session's next request is refused (400). Streaming responses are
produced from the finished completion (the `ModelClient` contract is request/response), so
time-to-first-token equals the full latency. This module holds the listeners, the sessions and the routes;
each dialect's request model and reply shapes are in `wire.py`; what one session's request bodies may cost
(`BodyBudget`: bodies at once, bytes, JSON values; parsing in worker threads) is in `intake.py`."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from evsys.model.base import ModelClient
from evsys.model.proxy import google_dialect
from evsys.model.proxy.intake import BodyBudget, ParseQueue, SessionIntake, json_value_check
from evsys.model.proxy.replies import (
    NO_TOOLS,
    UNKNOWN_KEY,
    error_response,
    mcp_error,
    refusal,
    status_for,
)
from evsys.model.proxy.session import Dialect, ProxySession, new_session_key
from evsys.model.proxy.wire import CallDefaults, completion_reply, decode_request, prepare_call
from evsys.util.bodylimit import BodyLimit, Scope
from evsys.util.httpserver import ConnectionLimits, GuardedServer
from evsys.util.net import listening_socket

log = logging.getLogger(__name__)

PINNED_SCOPE_KEY = "evsys.proxy.session_key"
MAX_BODY_BYTES = 32 * 1024 * 1024  # a long conversation with tool schemas is a few MB; images fit too
SESSION_LIMITS = ConnectionLimits(max_connections=32)  # one session's own socket (one sandbox)
SHARED_LIMITS = ConnectionLimits(max_connections=1024)  # the TCP / unix listener every session may use
ClientSource = ModelClient | Callable[[], ModelClient] | None


def _missing_extra() -> RuntimeError:
    return RuntimeError("the model proxy needs `starlette` and `uvicorn`: pip install 'evsys[harness]'")


def _bind_uds(path: Path) -> socket.socket:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if path.is_socket():
            path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    os.chmod(path, 0o666)  # the sandbox's unprivileged user must be able to connect; the key still applies
    return sock


def _bind_tcp(host: str, port: int) -> socket.socket:
    # proto=IPPROTO_TCP so asyncio sets TCP_NODELAY on accepted connections (else Nagle adds ~40 ms per call)
    return listening_socket(host, port)


def _listener(app: Any, sockets: list[socket.socket], limits: ConnectionLimits) -> GuardedServer:
    try:
        return GuardedServer(app, sockets, limits, name="the model proxy")
    except RuntimeError as exc:
        raise _missing_extra() from exc


def _pinned(app: Any, key: str) -> Any:
    """Wrap an ASGI app so requests it serves are marked as coming from `key`'s own socket."""

    async def pinned_app(scope: dict, receive: Any, send: Any) -> None:
        await app({**scope, PINNED_SCOPE_KEY: key}, receive, send)

    return pinned_app


class ModelProxy:
    """A recording, multi-session model proxy: `async with ModelProxy(client) as proxy:` or start/stop."""

    def __init__(
        self,
        client: ClientSource = None,
        *,
        max_tokens_cap: int | None = None,
        defaults: CallDefaults | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        session_limits: ConnectionLimits = SESSION_LIMITS,
        shared_limits: ConnectionLimits = SHARED_LIMITS,
        body_budget: BodyBudget = BodyBudget(),
    ) -> None:
        self._client_source = client
        self.max_tokens_cap = max_tokens_cap
        self.defaults = defaults or CallDefaults()
        self.calls_refused = 0  # calls refused past `defaults.max_calls` (the harness's --max-turns)
        self.max_body_bytes = max_body_bytes
        self.session_limits = session_limits
        self.shared_limits = shared_limits
        self.body_budget = body_budget
        self._parses = ParseQueue(body_budget.parse_workers)
        self._sessions: dict[str, ProxySession] = {}
        self._made_clients: dict[str, ModelClient] = {}  # by session key: what the client factory made
        self._session_listeners: dict[str, GuardedServer] = {}
        self._pending: set[asyncio.Task] = set()
        self._listener: GuardedServer | None = None
        self.url: str | None = None
        self.uds_path: Path | None = None
        self.app = self._build_app()

    async def __aenter__(self) -> ModelProxy:
        if self._listener is None:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(
        self, host: str = "127.0.0.1", port: int | None = 0, *, uds: str | Path | None = None
    ) -> str:
        """Listen on `host:port` (port 0: any free port; None: no TCP) and/or the unix socket `uds`.

        Returns the TCP base URL (`http://host:port`), or `http+unix://<path>` when there is no TCP port.
        """
        if self._listener is not None:
            raise RuntimeError("the proxy is already started")
        if port is None and uds is None:
            raise ValueError("ModelProxy.start needs a TCP port or a unix socket path (uds=)")
        sockets = []
        url = ""
        if port is not None:
            sockets.append(_bind_tcp(host, port))
            bound = sockets[-1].getsockname()
            url = f"http://{host if ':' not in host else f'[{host}]'}:{bound[1]}"
        if uds is not None:
            self.uds_path = Path(uds)
            sockets.append(_bind_uds(self.uds_path))
            url = url or f"http+unix://{self.uds_path}"
        self.url = url
        self._listener = _listener(self.app, sockets, self.shared_limits)
        await self._listener.start()
        return url

    async def stop(self) -> None:
        """Close every session and stop listening (idempotent)."""
        for key in list(self._sessions):
            self.close_session(key)
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        if self._listener is not None:
            listener, self._listener = self._listener, None
            await _stop(listener)

    def _make_client(self, model_client: ModelClient | None, key: str) -> ModelClient:
        if model_client is not None:
            return model_client
        source = self._client_source
        if source is None:
            raise ValueError(
                "open_session needs a model_client: the proxy was created without a default client"
            )
        if hasattr(source, "complete"):  # a client, else a factory of clients
            return source  # type: ignore[return-value]  # hasattr narrows a union to a made-up intersection
        made = self._made_clients[key] = source()  # the proxy's own: closed with the session
        return made

    def open_session(
        self, model_client: ModelClient | None = None, *, key: str | None = None
    ) -> ProxySession:
        """A new session (fresh key unless given) using `model_client`, else the proxy's client or factory (a
        client the factory makes is closed with its session)."""
        key = key or new_session_key()
        if key in self._sessions:
            raise ValueError("a session with this key is already open")
        session = ProxySession(key, self._make_client(model_client, key))
        self._sessions[key] = session
        return session

    async def open_session_socket(self, session: ProxySession, path: str | Path) -> Path:
        """Serve `session` alone on the unix socket `path` (bind it into the session's sandbox)."""
        if session.key not in self._sessions:
            raise ValueError("the session is not open on this proxy")
        path = Path(path)
        listener = _listener(_pinned(self.app, session.key), [_bind_uds(path)], self.session_limits)
        await listener.start()
        self._session_listeners[session.key] = listener
        return path

    @property
    def sessions(self) -> list[ProxySession]:
        """The open sessions."""
        return list(self._sessions.values())

    def get_session(self, key: str) -> ProxySession | None:
        """The open session with this key, if any."""
        return self._sessions.get(key)

    def close_session(self, key: str) -> ProxySession | None:
        """Refuse the key from now on, release the session's own socket; return the session (calls kept)."""
        session = self._sessions.pop(key, None)
        if session is not None:
            session.closed = True
            self._close_later(session.mcp_app.aclose if session.mcp_app is not None else None)
        made = self._made_clients.pop(key, None)
        if made is not None:
            self._close_later(made.aclose)
        listener = self._session_listeners.pop(key, None)
        if listener is not None:
            task = asyncio.get_running_loop().create_task(_stop(listener))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
        return session

    def _close_later(self, closer: Callable[[], Coroutine[Any, Any, None]] | None) -> None:
        """Run `closer` in the background, awaited by `stop()` (nothing runs when there is no event loop)."""
        with contextlib.suppress(RuntimeError):
            if closer is not None:
                task = asyncio.get_running_loop().create_task(closer())
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)

    # -- HTTP ---------------------------------------------------------------------------------------------

    def _build_app(self) -> Any:
        try:
            from starlette.applications import Starlette
            from starlette.routing import Route
        except ImportError as exc:
            raise _missing_extra() from exc
        routes = Starlette(
            routes=[
                Route("/health", self._health, methods=["GET"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1/chat/completions", self._openai, methods=["POST"]),
                Route("/v1/messages", self._anthropic, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/{version:str}/models/{target:path}", self._google, methods=["POST"]),
                Route("/mcp", _RawAsgi(self._mcp), methods=["GET", "POST", "DELETE"]),
            ]
        )
        values = json_value_check(self.body_budget.max_json_values)
        limited = BodyLimit(routes, self.max_body_bytes, refuse=refusal, inspect=values)
        return SessionIntake(limited, self.body_budget, key_of=self._key_of, refuse=refusal)

    def _key_of(self, scope: Scope) -> str | None:
        from starlette.requests import Request

        session = self._authorise(Request(scope))
        return None if session is None else session.key

    def _authorise(self, request: Any) -> ProxySession | None:
        key = request.headers.get("x-api-key", "") or request.headers.get("x-goog-api-key", "")
        key = key or request.query_params.get("key", "")
        auth = request.headers.get("authorization", "")
        if not key and auth.lower().startswith("bearer "):
            key = auth[7:].strip()
        session = self._sessions.get(key) if key else None
        pinned = request.scope.get(PINNED_SCOPE_KEY)
        if session is None or session.closed or (pinned is not None and pinned != key):
            return None
        return session

    async def _health(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        return JSONResponse({"status": "ok"})

    async def _models(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        anthropic = "anthropic-version" in request.headers
        session = self._authorise(request)
        if session is None:
            return error_response("anthropic" if anthropic else "openai", 401, UNKNOWN_KEY)
        name = session.model_client.model
        if anthropic:
            entry = {"type": "model", "id": name, "display_name": name, "created_at": "1970-01-01T00:00:00Z"}
            return JSONResponse({"data": [entry], "has_more": False, "first_id": name, "last_id": name})
        return JSONResponse(
            {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "evsys"}]}
        )

    async def _mcp(self, scope: dict, receive: Any, send: Any) -> None:
        """MCP for the caller's session only: 401 for a bad key, 404 when the session serves no tools."""
        from starlette.requests import Request

        session = self._authorise(Request(scope))
        if session is None:
            await mcp_error(401, UNKNOWN_KEY)(scope, receive, send)
        elif session.mcp_app is None:
            await mcp_error(404, NO_TOOLS)(scope, receive, send)
        else:
            await session.mcp_app(scope, receive, send)

    async def _openai(self, request: Any) -> Any:
        return await self._serve(request, "openai")

    async def _anthropic(self, request: Any) -> Any:
        return await self._serve(request, "anthropic")

    async def _responses(self, request: Any) -> Any:
        return await self._serve(request, "responses")

    async def _google(self, request: Any) -> Any:
        """`/v1beta/models/<model>:generateContent`, `:streamGenerateContent` and `:countTokens`."""
        from starlette.responses import JSONResponse

        try:
            model, method = google_dialect.parse_target(request.path_params["target"])
        except ValueError as exc:
            return error_response("google", 404, str(exc))
        if method == "countTokens":
            session = self._authorise(request)
            if session is None:
                return error_response("google", 401, UNKNOWN_KEY)
            count = functools.partial(decode_request, unwrap="generateContentRequest")
            parsed, refused = await self._decode(request, session, "google", count)
            if refused is not None:
                return refused
            return JSONResponse(google_dialect.count_tokens_response(parsed))
        if method not in ("generateContent", "streamGenerateContent"):
            return error_response("google", 404, f"method {method!r} is not served by the evsys proxy")
        return await self._serve(request, "google", model=model, stream=method == "streamGenerateContent")

    async def _serve(self, request: Any, dialect: Dialect, **from_path: Any) -> Any:
        session = self._authorise(request)
        if session is None:
            return error_response(dialect, 401, UNKNOWN_KEY)
        limit = self.defaults.max_calls
        if limit is not None and len(session.calls) >= limit:
            self.calls_refused += 1
            return error_response(
                dialect, 400, f"evsys: --max-turns {limit}: this trial's model calls are used up"
            )
        prepare = functools.partial(
            prepare_call, max_tokens_cap=self.max_tokens_cap, defaults=self.defaults, **from_path
        )
        ready, refused = await self._decode(request, session, dialect, prepare)
        if refused is not None:
            return refused
        messages, tools, params = ready.messages, ready.tools, ready.params
        parsed = ready.request
        call = session.begin_call(
            dialect, parsed.model, messages, tools, params, stream=parsed.stream, notes=ready.notes
        )
        started = time.perf_counter()
        try:
            completion = await session.model_client.complete(messages, tools=tools, params=params)
        except Exception as exc:
            session.finish_call(call, None, f"{type(exc).__name__}: {exc}", time.perf_counter() - started)
            return error_response(dialect, status_for(exc), str(exc) or type(exc).__name__)
        session.finish_call(call, completion, None, time.perf_counter() - started)
        return completion_reply(dialect, parsed, completion, self.max_tokens_cap)

    async def _decode(
        self, request: Any, session: ProxySession, dialect: Dialect, job: Callable[..., Any]
    ) -> tuple[Any, Any]:
        """`job(body, dialect)` (`decode_request` or `prepare_call`) in a worker thread, in the session's
        `ParseQueue` lane: (its result, None), or (None, the 400 response naming what is wrong)."""
        body = await request.body()
        done, problem = await self._parses.run(session.key, job, body, dialect)
        return done, None if problem is None else error_response(dialect, 400, problem)


class _RawAsgi:
    """Marks an `(scope, receive, send)` coroutine as a plain ASGI endpoint for a Starlette `Route`."""

    def __init__(self, handler: Callable[..., Any]) -> None:
        self.handler = handler

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        await self.handler(scope, receive, send)


async def _stop(listener: GuardedServer) -> None:
    """Stop a listener and remove its unix socket files."""
    paths = [s.getsockname() for s in listener.sockets if s.family == socket.AF_UNIX]
    await listener.stop()
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)
