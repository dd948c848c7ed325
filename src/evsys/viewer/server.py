"""Serving the viewer on 127.0.0.1 (`evsys view`)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING

from evsys.util.net import listening_socket
from evsys.viewer.app import JobSource
from evsys.viewer.jobdata import is_job_dir
from evsys.viewer.tokens import TokenDecoder

if TYPE_CHECKING:
    from starlette.types import ASGIApp

HOST = "127.0.0.1"


def source_for(path: Path, tokenizer: Path | None = None) -> JobSource:
    """What `evsys view PATH` shows: the job at PATH when it is one, else every job under PATH; token ids
    decoded with `tokenizer` when given (`TokenizerError` when it cannot be loaded), else with the tokenizer
    of each trial's local model when it is on this machine."""
    path = Path(path).resolve()
    decoder = TokenDecoder(tokenizer) if tokenizer is not None else None
    if is_job_dir(path):
        return JobSource(path.parent, only=path.name, decoder=decoder, find_tokenizers=True)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a directory (give a jobs directory or one job's directory)")
    return JobSource(path, decoder=decoder, find_tokenizers=True)


def bind(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:`port` (0 picks a free port); `OSError` when the port is taken."""
    return listening_socket(HOST, port, backlog=128)


def url_of(sock: socket.socket, source: JobSource) -> str:
    """The URL a browser opens: the job page when one job is shown, else the job list."""
    port = sock.getsockname()[1]
    suffix = f"#/job/{source.only}" if source.only else ""
    return f"http://{HOST}:{port}/{suffix}"


def serve(app: ASGIApp, sock: socket.socket) -> None:
    """Serve the viewer application (`create_app`) on `sock` until interrupted (blocks)."""
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])
