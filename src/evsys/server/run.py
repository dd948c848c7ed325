"""Running `evsys serve`: bind 127.0.0.1 (or a given host), build the service, serve with uvicorn."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from evsys.server.catalog import TaskCatalog
from evsys.server.service import ServeService, ServeSettings
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


def build_service(
    dataset: Path,
    settings: ServeSettings,
    *,
    job_name: str,
    jobs_dir: Path,
    sandbox: str = "local",
    model: str | None = None,
    base_url: str | None = None,
) -> ServeService:
    """The service over `dataset`'s tasks, recording into `jobs_dir/job_name`."""
    job = TaskCatalog.job_config(
        dataset,
        job_name=job_name,
        jobs_dir=jobs_dir,
        sandbox=sandbox,
        harness=settings.harness,
        model=model,
        base_url=base_url,
    )
    return ServeService(TaskCatalog.load(dataset, job), settings)


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
