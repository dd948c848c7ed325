"""The TCP-to-unix-socket forwarder, run as a real subprocess by Debian's stdlib-only python3 -I."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import openai
import pytest

import evsys.model.proxy.forwarder as forwarder_module
from evsys.model.local.client import LocalModelClient
from evsys.model.proxy import ModelProxy
from evsys.testing.tiny_model import DEMO_GREETING, DEMO_GREETING_REPLY, DEMO_RECIPE, build_tiny_model

FORWARDER = Path(forwarder_module.__file__)
SYSTEM_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


async def start_forwarder(uds: Path) -> tuple[asyncio.subprocess.Process, int]:
    """Start the forwarder on an ephemeral port and wait for its `listening` line."""
    process = await asyncio.create_subprocess_exec(
        SYSTEM_PYTHON,
        "-I",
        str(FORWARDER),
        "--listen",
        "127.0.0.1:0",
        "--uds",
        str(uds),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    line = await asyncio.wait_for(process.stdout.readline(), 30)
    assert line.startswith(b"listening 127.0.0.1:"), line
    return process, int(line.split(b":")[-1])


async def stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.kill()
    await process.wait()


@pytest.fixture
async def socket_proxy(tmp_path):
    """A proxy over the tiny model listening only on a unix socket."""
    client = LocalModelClient(str(build_tiny_model(DEMO_RECIPE)))
    proxy = ModelProxy(client, max_tokens_cap=48)
    await proxy.start(port=None, uds=tmp_path / "proxy.sock")
    yield proxy
    await proxy.stop()


@pytest.mark.needs_model
async def test_client_reaches_the_proxy_through_the_forwarder(socket_proxy):
    """An OpenAI client pointed at the forwarder's TCP port is served by the proxy behind the unix socket."""
    session = socket_proxy.open_session()
    process, port = await start_forwarder(socket_proxy.uds_path)
    try:
        client = openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key=session.key, max_retries=0
        )
        replies = await asyncio.gather(
            *[
                client.chat.completions.create(model="m", messages=DEMO_GREETING, temperature=0)
                for _ in range(3)
            ]
        )
        stream = await client.chat.completions.create(
            model="m", messages=DEMO_GREETING, temperature=0, stream=True
        )
        streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    finally:
        await stop(process)
    assert [r.choices[0].message.content for r in replies] == [DEMO_GREETING_REPLY["content"]] * 3
    assert streamed == DEMO_GREETING_REPLY["content"]
    assert len(session.calls) == 4 and all(c.completion.completion_token_ids for c in session.calls)


async def test_forwarder_drops_the_connection_when_the_socket_is_gone(tmp_path):
    """With nothing behind the socket the client sees a connection error and the forwarder says why."""
    process, port = await start_forwarder(tmp_path / "missing.sock")
    try:
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.APIConnectionError):
            await client.chat.completions.create(model="m", messages=DEMO_GREETING)
    finally:
        await stop(process)
    stderr = await process.stderr.read()
    assert b"cannot connect to" in stderr and b"missing.sock" in stderr


async def test_forwarder_rejects_a_bad_listen_address(tmp_path):
    """A malformed --listen value exits non-zero with a message naming the option."""
    process = await asyncio.create_subprocess_exec(
        SYSTEM_PYTHON,
        "-I",
        str(FORWARDER),
        "--listen",
        "nonsense",
        "--uds",
        str(tmp_path / "x.sock"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await process.communicate()
    assert process.returncode != 0 and b"--listen must be HOST:PORT" in stderr
