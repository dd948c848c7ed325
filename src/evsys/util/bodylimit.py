"""An ASGI middleware that bounds HTTP request bodies while they are read, before any handler parses them.

A body declared (`Content-Length`) or streamed (chunked) past the limit is refused with 413 as soon as the
limit is crossed, and the connection is closed: the rest is never read, so a client streaming a gigabyte costs
the server at most `limit` bytes of memory. A client that stops sending in the middle of its body for
`idle_timeout` seconds gets 408. An `inspect` hook may refuse a whole body before the app sees it (raising
`BodyRefused`). The app below sees the body (at most `limit` bytes) replayed as one message.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]
# the answer to a refused request: (scope, status, reason) -> an ASGI app that sends it
Refusal = Callable[[Scope, int, str], AsgiApp]
# a look at a whole body before the app sees it: raises BodyRefused to refuse it
Inspect = Callable[[bytes], Awaitable[None]]

BODY_IDLE_TIMEOUT_SEC = 60.0


class BodyRefused(Exception):
    """A request body is over the limit (413) or stalled (408)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def json_refusal(scope: Scope, status: int, reason: str) -> AsgiApp:
    """The default refusal: `{"error": {"message": reason}}` with `status`, closing the connection."""
    return raw_response(status, json.dumps({"error": {"message": reason}}).encode())


def raw_response(status: int, body: bytes, content_type: bytes = b"application/json") -> AsgiApp:
    """An ASGI app sending one complete response that asks for the connection to be closed."""

    async def respond(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", content_type),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return respond


class BodyLimit:
    """Wraps an ASGI app: HTTP bodies over `limit` bytes get 413, stalled bodies 408, before the app runs.

    `refuse` builds the answer (default: a JSON error); `inspect`, when given, sees each whole body first and
    may refuse it; other scope types (WebSocket, lifespan) pass through.
    """

    def __init__(
        self,
        app: AsgiApp,
        limit: int,
        *,
        refuse: Refusal = json_refusal,
        idle_timeout: float = BODY_IDLE_TIMEOUT_SEC,
        inspect: Inspect | None = None,
    ) -> None:
        self.app = app
        self.limit = limit
        self.refuse = refuse
        self.idle_timeout = idle_timeout
        self.inspect = inspect

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            body = await self.read(scope, receive)
            if body and self.inspect is not None:
                await self.inspect(body)
        except BodyRefused as refused:
            await self.refuse(scope, refused.status, refused.reason)(scope, no_body, send)
            return
        if body is not None:  # else the client left mid-body: nobody to answer
            await self.app(scope, _replay(body, receive), send)

    async def read(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body (None if the client disconnected first), or `BodyRefused` as soon as it is known
        to be too large or it stalls."""
        too_large = BodyRefused(413, f"request body over the limit of {self.limit:,} bytes")
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            raise too_large
        body = bytearray()
        while True:
            try:
                message = await asyncio.wait_for(receive(), self.idle_timeout)
            except TimeoutError:
                raise BodyRefused(408, f"no request body data for {self.idle_timeout:g} s") from None
            if message["type"] != "http.request":  # the client went away
                return None
            body += message.get("body", b"")
            if len(body) > self.limit:
                raise too_large
            if not message.get("more_body", False):
                return bytes(body)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


async def no_body() -> Message:
    """An ASGI `receive` for a request whose body is not read: one empty body message."""
    return {"type": "http.request", "body": b"", "more_body": False}


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that yields `body` once, then whatever the server sends next (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
