"""`evsys serve` against deeply nested and huge messages: an error answer, bounded memory, and the session
(and server) carry on."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest
import websockets

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared attack helpers
from load_attacks import stream_body

pytestmark = pytest.mark.slow

GIB = 1 << 30
MIB = 1 << 20
NESTED = "[" * 200_000  # 200 KB, under the 1 MiB message limit: only its depth is hostile
RESET = {"type": "reset", "data": {"task": "create-file"}}


def ws_url(served) -> str:
    return served.url.replace("http://", "ws://") + "/ws"


async def ask(ws, message) -> dict:
    await ws.send(message if isinstance(message, str) else json.dumps(message))
    return json.loads(await ws.recv())


def bash(command: str) -> dict:
    return {
        "type": "step",
        "data": {"type": "call_tool", "tool_name": "bash", "arguments": {"command": command}},
    }


async def test_deeply_nested_json_gets_an_error_and_the_websocket_session_goes_on(server):
    async with websockets.connect(ws_url(server), max_size=None) as ws:
        assert (await ask(ws, RESET))["type"] == "observation"
        nested = await ask(ws, NESTED)
        assert nested["type"] == "error" and nested["data"]["code"] == "INVALID_JSON"
        assert "nested deeper than" in nested["data"]["message"]
        inside = await ask(
            ws, json.dumps({"type": "step", "data": {"arguments": json.loads("[" * 500 + "]" * 500)}})
        )
        assert inside["data"]["code"] == "INVALID_JSON"  # parseable, but deeper than any real message
        also = await ask(
            ws, json.dumps({"type": "mcp", "data": "PLACEHOLDER"}).replace('"PLACEHOLDER"', NESTED)
        )
        assert also["data"]["code"] == "INVALID_JSON"
        ok = await ask(ws, bash("echo still-here"))  # the same session, its episode intact
        assert ok["data"]["observation"]["result"]["data"] == "still-here"


async def test_deeply_nested_json_over_http_gets_an_error_reply(server):
    async with httpx.AsyncClient(timeout=60) as http:
        step = await http.post(f"{server.url}/step", content=NESTED)
        mcp = await http.post(f"{server.url}/mcp", content=NESTED)
        assert step.status_code == 400 and step.json()["detail"]["code"] == "INVALID_JSON"
        assert mcp.status_code == 400 and mcp.json()["error"]["code"] == -32700
        assert (await http.get(f"{server.url}/health")).json()["status"] == "healthy"


@pytest.mark.parametrize("path", ["/step", "/reset", "/mcp"])
def test_a_huge_body_is_refused_while_read_and_memory_stays_bounded(server, path):
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    pid = server.process.pid
    flood = stream_body((host, int(port)), path, GIB, pid=pid)
    assert flood.sent >= MIB  # the attack ran: the server read up to its 1 MiB limit before refusing
    assert flood.status == 413 and flood.sent < GIB
    assert flood.rss_growth < 200 * MIB
    declared = stream_body((host, int(port)), path, GIB, pid=pid, declared=True)
    assert declared.status == 413 and declared.rss_growth < 200 * MIB
    assert httpx.get(f"{server.url}/health", timeout=30).json()["status"] == "healthy"
