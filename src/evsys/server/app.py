"""The Starlette application of `evsys serve`: `/ws`, the stateless HTTP endpoints, `/mcp`, `/health`,
`/metadata`, `/schema` (see evsys.engine.episodes.protocol for the messages).

Hostile input never takes the server down: a message over `max_message_bytes`, malformed JSON, an unknown
message type, an invalid action or an unknown tool each get an error answer naming the problem, and the
session stays usable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from pydantic import TypeAdapter, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from evsys import __version__
from evsys.agent.harness.events import HarnessEvent
from evsys.engine.episodes.episode import EventSink
from evsys.engine.episodes.protocol import (
    Action,
    ErrorCode,
    ListToolsAction,
    ResetParams,
    ServedObservation,
    ServeError,
    observation_payload,
    schemas,
)
from evsys.engine.episodes.service import ServeService, Session
from evsys.server.mcp import McpDispatcher, mcp_tools, no_session_error, rpc_error
from evsys.util.bodylimit import BodyLimit, Scope
from evsys.util.jsonparse import loads_bounded

log = logging.getLogger(__name__)
ACTION = TypeAdapter(Action)
_CLOSE = object()
MCP_SESSION_HEADER = "mcp-session-id"
INBOX_FRAMES = 16  # requests read ahead of the one running; more wait in the socket
REFUSAL_WAIT_SEC = 10.0  # how long a refused connection may take to send the request it is refused on


def _validation_payload(exc: ValidationError) -> dict[str, Any]:
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    where = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'message'}: {e['msg']}" for e in errors)
    return {
        "message": f"invalid message: {where}",
        "code": ErrorCode.VALIDATION_ERROR.value,
        "errors": errors,
    }


class WsHandler:
    """Answers the messages of one `/ws` connection (its session), one at a time, in order."""

    def __init__(self, service: ServeService, mcp: McpDispatcher, websocket: WebSocket) -> None:
        self.service = service
        self.mcp = mcp
        self._websocket = websocket
        # OpenEnv's MCP client connects its WebSocket with `?session_id=` of the HTTP MCP session it opened,
        # so that reset/step and /mcp's tools/list and tools/call act in one episode: the WebSocket then
        # drives that session and leaves it open when it goes (the HTTP side closes it)
        self._shared = mcp.find(websocket.query_params.get("session_id"))

    def _release(self, session: Session) -> None:
        """The WebSocket is gone: its own session closes (its episode is recorded); a shared one stays."""
        if session is not self._shared:
            session.close("the client disconnected")

    async def answer(self, session: Session, text: str) -> dict[str, Any] | object:
        """The answer to one raw message (or `_CLOSE`)."""
        if len(text.encode()) > self.service.settings.max_message_bytes:
            limit = self.service.settings.max_message_bytes
            error = ServeError(ErrorCode.PAYLOAD_TOO_LARGE, f"message over the limit of {limit:,} bytes")
            return {"type": "error", "data": error.payload()}
        try:
            message = loads_bounded(text)
        except ValueError as exc:  # invalid, or nested too deeply (never a RecursionError)
            return {"type": "error", "data": {"message": f"invalid JSON: {exc}", "code": "INVALID_JSON"}}
        if not isinstance(message, dict):
            error = ServeError(ErrorCode.VALIDATION_ERROR, "a message is a JSON object with a 'type'")
            return {"type": "error", "data": error.payload()}
        request_id = message.get("id")
        answer = await self._dispatch(session, message)
        if answer is not _CLOSE and isinstance(request_id, str | int | float) and isinstance(answer, dict):
            answer["id"] = request_id
        return answer

    async def _dispatch(self, session: Session, message: dict[str, Any]) -> dict[str, Any] | object:
        kind, data = message.get("type"), message.get("data")
        try:
            if kind == "mcp":  # tools/call takes the session's lock itself
                response, _ = await self.mcp.dispatch(data, session)
                return {"type": "mcp", "data": response or {}}
            async with session.lock:
                if kind == "reset":
                    observation = await session.reset(ResetParams.model_validate(data or {}))
                    return {"type": "observation", "data": observation_payload(observation, None, False)}
                if kind == "step":
                    sink = self._event_sink(message) if message.get("stream") is True else None
                    return {"type": "observation", "data": await self._step(session, data, sink)}
                if kind == "state":
                    return {"type": "state", "data": session.state().model_dump(mode="json")}
            if kind == "close":
                return _CLOSE
            raise ServeError(
                ErrorCode.UNKNOWN_TYPE,
                f"unknown message type {kind!r}; expected reset, step, state, mcp, close",
            )
        except ServeError as exc:
            return {"type": "error", "data": exc.payload()}
        except ValidationError as exc:
            return {"type": "error", "data": _validation_payload(exc)}
        except Exception as exc:  # a bug or a sandbox failure: answered, logged, the server stays up
            log.exception("a /ws request failed")
            return {"type": "error", "data": {"message": str(exc), "code": ErrorCode.EXECUTION_ERROR.value}}

    async def _step(self, session: Session, data: Any, sink: EventSink | None = None) -> dict[str, Any]:
        action = ACTION.validate_python(data if data is not None else {})
        if isinstance(action, ListToolsAction):
            harness_mode = self.service.settings.harness is not None
            tools = mcp_tools(session, harness_mode=harness_mode)
            return observation_payload(ServedObservation(tools=tools), None, False)
        observation, reward, done = await session.step(action, sink)
        return observation_payload(observation, reward, done)

    def _event_sink(self, message: dict[str, Any]) -> EventSink:
        """Where a streamed harness turn's events go: one `event` frame each, before the observation."""
        websocket, request_id = self._websocket, message.get("id")

        async def send(event: HarnessEvent) -> None:
            frame: dict[str, Any] = {"type": "event", "data": event.model_dump(mode="json")}
            if isinstance(request_id, str | int | float):
                frame["id"] = request_id
            with contextlib.suppress(Exception):  # a client gone mid-turn still gets its episode recorded
                await websocket.send_text(json.dumps(frame))

        return send

    async def serve(self) -> None:
        """The session loop: one answer per request, in order; the session is freed however it ends."""
        websocket = self._websocket
        await websocket.accept()
        try:
            session = self._shared or self.service.open_session("ws")
        except ServeError as exc:  # answer the first request with the reason, then close (try again later)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(websocket.receive(), REFUSAL_WAIT_SEC)
                await websocket.send_text(json.dumps({"type": "error", "data": exc.payload()}))
            with contextlib.suppress(Exception):
                await websocket.close(code=1013, reason="capacity reached")
            return

        async def drop() -> None:
            await websocket.close(code=1001, reason="idle timeout")

        session.on_reap = drop
        inbox: asyncio.Queue[str | None] = asyncio.Queue(maxsize=INBOX_FRAMES)
        reader = asyncio.create_task(self._read(session, inbox))
        try:
            while not session.closed:
                text = await inbox.get()
                if text is None or session.closed:
                    break
                session.touch()
                answer = await self.answer(session, text)
                if answer is _CLOSE:
                    break
                try:
                    await websocket.send_text(json.dumps(answer))
                except Exception:  # the client is gone (its episode is recorded all the same)
                    break
                session.touch()
        finally:
            self._release(session)
            reader.cancel()
            with contextlib.suppress(Exception):
                await websocket.close()

    async def _read(self, session: Session, inbox: asyncio.Queue[str | None]) -> None:
        """Frames into `inbox` (bounded: a flooding client waits), read while a request runs so that a
        client that disconnects mid-step ends its episode (and the running action) at once."""
        try:
            while True:
                frame = await self._websocket.receive()
                if frame["type"] == "websocket.disconnect":
                    break
                text = frame.get("text")
                if text is None:
                    text = (frame.get("bytes") or b"").decode("utf-8", errors="replace")
                await inbox.put(text)
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            self._release(session)
            with contextlib.suppress(asyncio.QueueFull):
                inbox.put_nowait(None)


def _error_response(exc: ServeError) -> JSONResponse:
    status = {
        ErrorCode.PAYLOAD_TOO_LARGE: 413,
        ErrorCode.CAPACITY_REACHED: 503,
        ErrorCode.UNKNOWN_TASK: 404,
    }.get(exc.code, 400)
    return JSONResponse({"detail": exc.payload()}, status_code=status)


class HttpHandlers:
    """The HTTP endpoints: stateless `/reset` and `/step`, `/state`, `/health`, `/metadata`, `/schema`,
    `/mcp`."""

    def __init__(self, service: ServeService, mcp: McpDispatcher) -> None:
        self.service = service
        self.mcp = mcp

    async def _json(self, request: Request) -> Any:
        body = await request.body()  # at most max_message_bytes: BodyLimit refused larger ones unread
        if not body.strip():
            return {}
        try:
            return loads_bounded(body)
        except ValueError as exc:
            raise ServeError(ErrorCode.INVALID_JSON, f"invalid JSON: {exc}") from None

    async def reset(self, request: Request) -> Response:
        """The task's first observation, without a sandbox (stateless: nothing runs until a step)."""
        try:
            params = ResetParams.model_validate(await self._json(request))
            task = self.service.catalog.pick(params.task, params.seed)
        except ServeError as exc:
            return _error_response(exc)
        except ValidationError as exc:
            return JSONResponse({"detail": _validation_payload(exc)}, status_code=422)
        observation = ServedObservation(
            task=task.name, instruction=task.task.instruction, metadata={"stateless": True}
        )
        return JSONResponse(observation_payload(observation, None, False))

    async def step(self, request: Request) -> Response:
        """A one-action episode: reset, the action, then the verifier; the reward comes back."""
        try:
            body = await self._json(request)
            if not isinstance(body, dict):
                raise ServeError(ErrorCode.VALIDATION_ERROR, "the body is an object with an 'action'")
            action = ACTION.validate_python(body.get("action", {}))
            params = ResetParams.model_validate(body)
            session = self.service.open_session("http")
        except ServeError as exc:
            return _error_response(exc)
        except ValidationError as exc:
            return JSONResponse({"detail": _validation_payload(exc)}, status_code=422)
        try:
            async with session.lock:
                await session.reset(params, max_steps=1)
                if isinstance(action, ListToolsAction):
                    harness_mode = self.service.settings.harness is not None
                    tools = mcp_tools(session, harness_mode=harness_mode)
                    payload = observation_payload(ServedObservation(tools=tools), None, False)
                    return JSONResponse(payload)
                observation, reward, done = await session.step(action)
                return JSONResponse(observation_payload(observation, reward, done))
        except ServeError as exc:
            return _error_response(exc)
        finally:
            session.close("the stateless step is answered")

    async def state(self, request: Request) -> Response:
        """Stateless HTTP has no episode: an empty state."""
        return JSONResponse({"episode_id": None, "step_count": 0})

    async def health(self, request: Request) -> Response:
        """Status, sessions, episodes."""
        return JSONResponse(self.service.health())

    async def metadata(self, request: Request) -> Response:
        """What this server serves."""
        catalog = self.service.catalog
        dataset = catalog.job.datasets[0]
        return JSONResponse(
            {
                "name": f"evsys:{dataset.name}",
                "description": f"{len(catalog.tasks)} evsys task(s) from {dataset}; reset(task=NAME) or "
                "reset(seed=N) picks one; tools: bash, read_file, write_file, str_replace, submit, and "
                "the task's MCP tools (mcp__<server>__<tool>)",
                "version": __version__,
                "tasks": catalog.names,
                "skipped_tasks": catalog.skipped,
                "job_dir": str(catalog.job.job_dir),
                "max_steps": self.service.settings.limits.max_steps,
            }
        )

    async def schema(self, request: Request) -> Response:
        """The JSON schemas of action, observation and state."""
        return JSONResponse(schemas())

    async def mcp_post(self, request: Request) -> Response:
        """One JSON-RPC message (MCP Streamable HTTP, JSON answers)."""
        try:
            message = await self._json(request)
        except ServeError as exc:
            code = -32700 if exc.code == ErrorCode.INVALID_JSON else -32600
            return JSONResponse(rpc_error(None, code, str(exc)), status_code=400)
        header = request.headers.get(MCP_SESSION_HEADER)
        session = self.mcp.find(header)
        if header and session is None:
            return JSONResponse(rpc_error(None, -32600, str(no_session_error())), status_code=404)
        reset = ResetParams.model_validate(
            {k: v for k, v in request.query_params.items() if k in ("task", "seed", "episode_id")}
        )
        response, opened = await self.mcp.dispatch(message, session, reset)
        if response is None:
            return Response(status_code=202)
        headers = {"Mcp-Session-Id": opened.id} if opened is not None and opened.kind == "mcp" else {}
        return JSONResponse(response, headers=headers)

    async def mcp_delete(self, request: Request) -> Response:
        """End an MCP session (its episode is recorded)."""
        session = self.mcp.find(request.headers.get(MCP_SESSION_HEADER))
        if session is None:
            return Response(status_code=404)
        session.close("the client ended the MCP session")
        return Response(status_code=204)

    async def mcp_get(self, request: Request) -> Response:
        """No server-initiated stream: answers arrive with each POST."""
        return Response(status_code=405, headers={"Allow": "POST, DELETE"})


def _refusal(scope: Scope, status: int, reason: str) -> JSONResponse:
    """A body `BodyLimit` refused (413 too large, 408 stalled), as a JSON-RPC error on `/mcp` and in the
    `{"detail": ...}` shape elsewhere; the connection is closed after it."""
    code = ErrorCode.PAYLOAD_TOO_LARGE if status == 413 else ErrorCode.VALIDATION_ERROR
    if scope.get("path") == "/mcp":
        response = JSONResponse(rpc_error(None, -32600, reason), status_code=status)
    else:
        response = JSONResponse({"detail": ServeError(code, reason).payload()}, status_code=status)
    response.headers["connection"] = "close"
    return response


def create_app(service: ServeService) -> BodyLimit:
    """The application over `service` (its sessions and job); starts and closes it with the app. Request
    bodies are bounded while they are read (`max_message_bytes`), before any endpoint parses them."""
    mcp = McpDispatcher(service)
    http = HttpHandlers(service, mcp)

    async def ws_endpoint(websocket: WebSocket) -> None:
        await WsHandler(service, mcp, websocket).serve()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.close()

    routes = [
        WebSocketRoute("/ws", ws_endpoint),
        Route("/reset", http.reset, methods=["POST"]),
        Route("/step", http.step, methods=["POST"]),
        Route("/state", http.state, methods=["GET"]),
        Route("/health", http.health, methods=["GET"]),
        Route("/metadata", http.metadata, methods=["GET"]),
        Route("/schema", http.schema, methods=["GET"]),
        Route("/mcp", http.mcp_post, methods=["POST"]),
        Route("/mcp", http.mcp_delete, methods=["DELETE"]),
        Route("/mcp", http.mcp_get, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    return BodyLimit(app, service.settings.max_message_bytes, refuse=_refusal)
