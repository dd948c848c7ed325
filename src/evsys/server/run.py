"""Running `evsys serve`: bind 127.0.0.1 (or a given host) and serve the app with uvicorn (the service itself:
`evsys.engine.episodes.build_service`)."""

from __future__ import annotations

import socket
from typing import Any

from evsys.engine.episodes.service import ServeSettings
from evsys.util.net import listening_socket

WS_FRAME_SLACK = (
    4  # frames up to this multiple of the message limit get a clear error; larger ones: close 1009
)


def missing_extra() -> RuntimeError:
    """The error for a missing `serve` extra."""
    return RuntimeError("evsys serve needs starlette, uvicorn and websockets: pip install 'evsys[serve]'")


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket (TCP_NODELAY on accepted connections; port 0 picks a free one)."""
    return listening_socket(host, port)


def serve(app: Any, sock: socket.socket, settings: ServeSettings, *, ping_interval: float) -> None:
    """Serve `app` on `sock` until interrupted (blocks). Pings find half-open sockets; the idle timeout
    reclaims sessions whose client never speaks again."""
    try:
        import uvicorn
        import websockets  # noqa: F401
    except ImportError as exc:
        raise missing_extra() from exc
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        ws="websockets-sansio",
        ws_max_size=settings.max_message_bytes * WS_FRAME_SLACK + 65536,
        ws_ping_interval=ping_interval,
        ws_ping_timeout=ping_interval,
        timeout_graceful_shutdown=5,
    )
    uvicorn.Server(config).run(sockets=[sock])
