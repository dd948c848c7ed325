"""Hostile and broken clients against a real `evsys serve`: the server answers, frees, and stays up."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import websockets
from openenv.core.generic_client import GenericEnvClient
from serve_process import start_serve, stop_serve

pytestmark = pytest.mark.slow

SLOW_VERIFIER = Path(__file__).resolve().parent / "tasks" / "slow-verifier"

RESET = {"type": "reset", "data": {"task": "create-file"}}


def call(tool: str, **arguments) -> dict:
    """An OpenEnv call_tool action."""
    return {"type": "call_tool", "tool_name": tool, "arguments": arguments}


async def poll_health(served, settled, limit: float = 60.0) -> dict:
    """/health, polled until `settled(health)` (or `limit` seconds have passed)."""
    deadline = time.monotonic() + limit
    async with httpx.AsyncClient() as http:
        while True:
            health = (await http.get(f"{served.url}/health")).json()
            if settled(health) or time.monotonic() > deadline:
                return health
            await asyncio.sleep(0.05)


async def wait_for_sessions(served, count: int, limit: float = 60.0) -> dict:
    """Poll /health until `count` sessions are active (the strict server's tests share 2 slots) and, for 0,
    no ended episode is still being verified."""

    def settled(health: dict) -> bool:
        return health["active_sessions"] == count and (count > 0 or not health["finishing_episodes"])

    return await poll_health(served, settled, limit)


async def ask(ws, message) -> dict:
    """Send one message (a dict, or raw text) and read its answer."""
    await ws.send(message if isinstance(message, str) else json.dumps(message))
    return json.loads(await ws.recv())


def ws_url(served) -> str:
    return served.url.replace("http://", "ws://") + "/ws"


async def test_malformed_oversized_and_unknown_input_get_clear_errors_and_the_session_survives(strict_server):
    await wait_for_sessions(strict_server, 0)
    async with websockets.connect(ws_url(strict_server), max_size=None) as ws:
        answers = {
            "json": await ask(ws, "{not json"),
            "array": await ask(ws, "[1, 2]"),
            "type": await ask(ws, {"type": "launch"}),
            "early": await ask(ws, {"type": "step", "data": call("bash", command="true")}),
            "big": await ask(ws, {"type": "step", "data": call("bash", command="x" * 20_000)}),
            "action": await ask(ws, {"type": "step", "data": {"type": "explode"}}),
        }
        codes = {name: a["data"]["code"] for name, a in answers.items()}
        assert codes == {
            "json": "INVALID_JSON",
            "array": "VALIDATION_ERROR",
            "type": "UNKNOWN_TYPE",
            "early": "NO_EPISODE",
            "big": "PAYLOAD_TOO_LARGE",
            "action": "VALIDATION_ERROR",
        }
        assert "8,192 bytes" in answers["big"]["data"]["message"]
        assert "explode" in answers["action"]["data"]["message"]
        assert (await ask(ws, RESET))["type"] == "observation"
        unknown = await ask(ws, {"type": "step", "data": call("reset")})
        assert unknown["data"]["observation"]["error"]["error_type"] == "tool_not_found"
        bad = await ask(ws, {"type": "step", "data": call("bash", command=5)})
        assert bad["data"]["observation"]["error"]["error_type"] == "invalid_args"
        ok = await ask(ws, {"type": "step", "data": call("bash", command="echo still-here")})
        assert ok["data"]["observation"]["result"]["data"] == "still-here"
        assert ok["data"]["observation"]["metadata"]["step"] == 1  # refused actions cost no step
    # a frame far over the limit closes that connection (1009); the server itself stays up
    async with websockets.connect(ws_url(strict_server), max_size=None) as ws:
        await ws.send(json.dumps({"type": "step", "data": "y" * 200_000}))
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    async with httpx.AsyncClient() as http:
        too_big = await http.post(f"{strict_server.url}/step", content=b"{" + b" " * 20_000 + b"}")
        garbage = await http.post(f"{strict_server.url}/mcp", content=b"\xff\xfe")
        assert too_big.status_code == 413 and "PAYLOAD_TOO_LARGE" in too_big.text
        assert garbage.status_code == 400 and garbage.json()["error"]["code"] == -32700
        assert (await http.get(f"{strict_server.url}/health")).json()["status"] == "healthy"


async def test_a_slow_action_is_answered_in_time_and_the_session_stays_in_step(strict_server):
    await wait_for_sessions(strict_server, 0)
    async with GenericEnvClient(base_url=strict_server.url, message_timeout_s=30) as env:
        await env.reset(task="create-file")
        slow = await env.step(call("bash", command="sleep 20; echo late"))
        after = await env.step(call("bash", command="echo after"))
    assert "timed out after 1 s" in slow.observation["result"]["data"]
    assert "late" not in slow.observation["result"]["data"]
    assert after.observation["result"]["data"] == "after"
    # requests sent back to back are answered once each, in order, with their ids echoed
    async with websockets.connect(ws_url(strict_server)) as ws:
        await ws.send(json.dumps({**RESET, "id": "r"}))
        await ws.send(json.dumps({"type": "step", "data": call("bash", command="echo one"), "id": 1}))
        await ws.send(json.dumps({"type": "step", "data": call("bash", command="echo two"), "id": 2}))
        answers = [json.loads(await ws.recv()) for _ in range(3)]
    assert [a["id"] for a in answers] == ["r", 1, 2]
    assert [a["data"]["observation"].get("result", {}).get("data") for a in answers[1:]] == ["one", "two"]


async def test_the_step_limit_ends_and_scores_the_episode(strict_server):
    await wait_for_sessions(strict_server, 0)
    async with GenericEnvClient(base_url=strict_server.url) as env:
        await env.reset(task="create-file")
        steps = [await env.step(call("bash", command=f"echo {i}")) for i in range(3)]
        with pytest.raises(RuntimeError, match="episode is over"):
            await env.step(call("bash", command="echo 4"))
    assert [s.done for s in steps] == [False, False, True]
    assert steps[-1].reward == 0.0 and steps[-1].observation["metadata"]["ended_by"] == "max_steps"


async def test_sessions_over_the_limit_are_refused_until_one_closes(strict_server):
    await wait_for_sessions(strict_server, 0)
    first = GenericEnvClient(base_url=strict_server.url)
    second = GenericEnvClient(base_url=strict_server.url)
    try:
        await first.reset(task="create-file")
        await second.reset(task="create-file")
        async with GenericEnvClient(base_url=strict_server.url) as third:
            with pytest.raises(RuntimeError, match="CAPACITY_REACHED"):
                await third.reset(task="create-file")
    finally:
        await first.close()
        await second.close()
    await wait_for_sessions(strict_server, 0)
    async with GenericEnvClient(base_url=strict_server.url) as again:
        assert (await again.reset(task="create-file")).done is False


HALF_OPEN_CLIENT = """
import json, sys, time
from websockets.sync.client import connect
ws = connect(sys.argv[1])
ws.send(json.dumps({"type": "reset", "data": {"task": "create-file"}}))
answer = json.loads(ws.recv())
print(answer["data"]["observation"]["metadata"]["trial_name"], flush=True)
time.sleep(600)
"""


async def test_a_half_open_socket_frees_its_session_and_sandbox(strict_server):
    await wait_for_sessions(strict_server, 0)
    child = subprocess.Popen(  # noqa: ASYNC220 - a client process to freeze, started once
        [sys.executable, "-c", HALF_OPEN_CLIENT, ws_url(strict_server)], stdout=subprocess.PIPE, text=True
    )
    try:
        trial_name = (await asyncio.to_thread(child.stdout.readline)).strip()
        assert trial_name, "the client never got its episode"
        assert (await wait_for_sessions(strict_server, 1))["active_sessions"] == 1  # it holds a session
        os.kill(child.pid, signal.SIGSTOP)  # the socket stays open; the client never answers again
        health = await wait_for_sessions(strict_server, 0)
        assert health["active_sessions"] == 0
        result = await asyncio.to_thread(strict_server.trial_result, trial_name)
        assert "before submit" in result["failure"]["message"]  # ended, verified and recorded
        assert result["reward"] == 0.0
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()


async def test_a_client_leaving_mid_step_ends_its_running_action_and_episode(server):
    async with websockets.connect(ws_url(server)) as ws:
        reset = await ask(ws, RESET)
        trial_name = reset["data"]["observation"]["metadata"]["trial_name"]
        await ws.send(json.dumps({"type": "step", "data": call("bash", command="touch started; sleep 1000")}))
        await asyncio.sleep(0.5)  # the command is running when the client goes away
    result = await asyncio.to_thread(server.trial_result, trial_name)
    # abandoned at once (not when the 30 s step timeout would have ended the command), then verified
    assert "the client disconnected during step 1" in result["failure"]["message"]
    assert result["reward"] == 0.0


async def test_a_client_cannot_see_or_drive_another_session(server):
    async with GenericEnvClient(base_url=server.url) as a, GenericEnvClient(base_url=server.url) as b:
        await a.reset(task="create-file")
        await b.reset(task="create-file")
        await a.step(call("write_file", path="/app/secret.txt", content="a's secret\n"))
        seen = await b.step(call("bash", command="cat /app/secret.txt; ls /app"))
        state_a, state_b = await a.state(), await b.state()
    assert "a's secret" not in seen.observation["result"]["data"]
    assert state_a["episode_id"] != state_b["episode_id"] and state_b["step_count"] == 1
    # MCP sessions answer only to their own unguessable id
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(headers=headers) as http:
        forged = {"Mcp-Session-Id": "not-a-session"}
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "bash", "arguments": {}},
        }
        refused = await http.post(f"{server.url}/mcp", json=body, headers=forged)
        no_session = await http.post(f"{server.url}/mcp", json=body)
        closed = await http.post(
            f"{server.url}/mcp",
            json={
                "jsonrpc": "2.0",
                "id": 2,
                "method": "openenv/session/close",
                "params": {"session_id": "x"},
            },
        )
    assert refused.status_code == 404
    assert "initialize first" in no_session.json()["error"]["message"]
    assert "unknown session_id" in closed.json()["error"]["message"]


@pytest.mark.needs_sandbox
async def test_episodes_still_being_verified_count_against_capacity(tmp_path):
    served = start_serve(tmp_path, "--max-sessions", "1", dataset=SLOW_VERIFIER)
    try:
        async with GenericEnvClient(base_url=served.url) as env:
            await env.reset()
        health = await poll_health(served, lambda h: h["active_sessions"] == 0)  # the client left
        assert health["finishing_episodes"] == 1  # its episode's 5 s verification runs
        async with GenericEnvClient(base_url=served.url) as env:
            with pytest.raises(RuntimeError, match="1 ended and being verified"):
                await env.reset()
    finally:
        stop_serve(served)
    result = json.loads(next(served.job_dir.glob("*/result.json")).read_text())
    assert result["reward"] == 1.0  # the left episode was verified and recorded all the same
