"""Session fixtures for model tests: the tiny trained model, a client over it, real uvicorn servers."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evsys.testing.tiny_model import DEMO_RECIPE, build_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The demo tiny model: calls `bash ls` for DEMO_LIST_FILES, greets for DEMO_GREETING (cached)."""
    return build_tiny_model(DEMO_RECIPE)


@pytest.fixture(scope="session")
def tiny_client(tiny_model_dir: Path) -> Any:
    """A LocalModelClient over the tiny model."""
    from evsys.model.local.client import LocalModelClient

    return LocalModelClient(str(tiny_model_dir))


@contextlib.contextmanager
def run_uvicorn(app: Any) -> Iterator[str]:
    """Serve `app` with uvicorn on 127.0.0.1 and an ephemeral port, in a thread; yields the base URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture(scope="session")
def serve_app() -> Any:
    """The `run_uvicorn` context manager, for tests that serve their own app."""
    return run_uvicorn


@pytest.fixture(scope="session")
def tiny_server(tiny_client: Any) -> Iterator[str]:
    """`evsys model serve`'s app over the tiny model, served as model name `tiny`; yields the /v1 base URL."""
    from evsys.model.serve import create_app

    with run_uvicorn(create_app(tiny_client, "tiny")) as url:
        yield url + "/v1"
