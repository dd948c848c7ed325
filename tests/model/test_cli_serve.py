"""`evsys model serve` as a real subprocess, queried over HTTP."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys

import httpx
import pytest

from evsys.model import SamplingParams, create_model_client
from evsys.testing.tiny_model import DEMO_GREETING, DEMO_GREETING_REPLY

WIDE = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1"}
LAUNCH = "from evsys.cli.model import model_app; model_app()"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_serve_command_answers_chat_requests(tiny_model_dir):
    """The command loads the model, serves it under the -m string, and answers through the openai backend."""
    port = _free_port()
    model = f"local:{tiny_model_dir}"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        LAUNCH,
        "serve",
        "-m",
        model,
        "--port",
        str(port),
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        while b"serving" not in (line := await proc.stderr.readline()):  # printed once the model is loaded
            if not line:
                pytest.fail(f"evsys model serve exited early with {await proc.wait()}")
        async with httpx.AsyncClient() as http:
            for _ in range(200):
                try:
                    listed = (await http.get(f"http://127.0.0.1:{port}/v1/models")).json()
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.05)
        assert listed["data"][0]["id"] == model
        client = create_model_client(f"vllm:{model}", base_url=f"http://127.0.0.1:{port}/v1")
        done = await client.complete(DEMO_GREETING, params=SamplingParams(temperature=0))
        await client.aclose()
        assert done.text == DEMO_GREETING_REPLY["content"]
    finally:
        proc.terminate()
        await proc.wait()


@pytest.mark.needs_process
def test_serve_rejects_remote_providers():
    """Serving is for the local engine only; a remote model string is refused with a clear message."""
    out = subprocess.run(
        [sys.executable, "-c", LAUNCH, "serve", "-m", "openai:gpt-4.1"],
        capture_output=True,
        text=True,
        timeout=60,
        env=WIDE,
    )
    assert out.returncode != 0
    assert "serve runs the local engine" in out.stderr
    bad = subprocess.run(
        [sys.executable, "-c", LAUNCH, "serve", "-m", "nope:x"], capture_output=True, text=True, env=WIDE
    )
    assert bad.returncode != 0 and "unknown model provider 'nope'" in bad.stderr


def _serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", LAUNCH, "serve", *args], env=WIDE, capture_output=True, text=True, timeout=120
    )


@pytest.mark.needs_process
def test_serve_on_a_busy_port_fails_before_saying_serving():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _serve("--port", str(port))
    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "serving" not in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.needs_process
def test_serve_a_missing_local_model_is_one_clear_line(tmp_path):
    done = _serve("-m", f"local:{tmp_path}/nope", "--port", str(_free_port()))
    assert done.returncode == 2
    assert f"local model '{tmp_path}/nope' is not a directory" in done.stderr
    assert "Traceback" not in done.stderr
