"""The OpenAI-compatible client honours HTTP_PROXY / NO_PROXY, against real HTTP servers on 127.0.0.1: one
plays the model server, one a forwarding proxy; each records the request lines it was sent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from evsys.model import create_model_client

ANSWER = {
    "id": "c",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1},
}


class RecordingServer:
    """A tiny HTTP/1.1 server that answers every request with ANSWER and records its request line."""

    def __init__(self) -> None:
        self.request_lines: list[str] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while head := await reader.readuntil(b"\r\n\r\n"):
            lines = head.decode().split("\r\n")
            self.request_lines.append(lines[0])
            length = next((int(h.split(":")[1]) for h in lines if h.lower().startswith("content-length")), 0)
            await reader.readexactly(length)
            body = json.dumps(ANSWER).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()


@pytest.fixture
async def servers() -> AsyncIterator[tuple[RecordingServer, str, RecordingServer, str]]:
    model, proxy = RecordingServer(), RecordingServer()
    model_url, proxy_url = await model.start(), await proxy.start()
    yield model, model_url, proxy, proxy_url
    await model.close()
    await proxy.close()


@pytest.fixture(autouse=True)
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


async def _one_call(base_url: str) -> str:
    client = create_model_client("vllm:m", base_url=f"{base_url}/v1")
    try:
        return (await client.complete([{"role": "user", "content": "hello"}])).text
    finally:
        await client.aclose()


async def test_calls_go_through_the_proxy_the_environment_names(servers, monkeypatch):
    model, model_url, proxy, proxy_url = servers
    monkeypatch.setenv("HTTP_PROXY", proxy_url)
    assert await _one_call(model_url) == "hi"
    assert proxy.request_lines == [f"POST {model_url}/v1/chat/completions HTTP/1.1"]
    assert model.request_lines == []


async def test_no_proxy_exempts_the_model_host(servers, monkeypatch):
    model, model_url, proxy, proxy_url = servers
    monkeypatch.setenv("HTTP_PROXY", proxy_url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert await _one_call(model_url) == "hi"
    assert model.request_lines == ["POST /v1/chat/completions HTTP/1.1"]
    assert proxy.request_lines == []
