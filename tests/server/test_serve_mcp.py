"""`/mcp` of a real `evsys serve` through the official `mcp` SDK client (Streamable HTTP)."""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.slow

RESERVED = {"reset", "step", "state", "close"}


async def test_mcp_sdk_lists_and_calls_tools_to_a_reward_and_reserved_names_are_absent(server):
    url = f"{server.url}/mcp?task=create-file"
    async with (
        httpx2.AsyncClient(timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as mcp,
    ):
        names = [tool.name for tool in (await mcp.list_tools()).tools]
        wrote = await mcp.call_tool(
            "write_file", {"path": "/app/greeting.txt", "content": "Hello from evsys!\n"}
        )
        shown = await mcp.call_tool("bash", {"command": "cat /app/greeting.txt"})
        final = await mcp.call_tool("submit", {"message": "done"})
    assert names == ["bash", "read_file", "write_file", "str_replace", "submit"]
    assert not RESERVED & set(names)
    assert wrote.is_error is False and shown.content[0].text == "Hello from evsys!"
    assert final.meta["evsys/done"] is True and final.meta["evsys/reward"] == 1.0


async def test_mcp_unknown_and_reserved_tools_are_refused_and_the_session_goes_on(server):
    url = f"{server.url}/mcp?task=create-file"
    async with (
        httpx2.AsyncClient(timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as mcp,
    ):
        for name in ("reset", "grade"):
            with pytest.raises(Exception, match=f"unknown tool: {name}"):
                await mcp.call_tool(name, {})
        bad = await mcp.call_tool("bash", {"cmd": "ls"})
        ok = await mcp.call_tool("bash", {"command": "echo fine"})
    assert bad.is_error is True and "command" in bad.content[0].text
    assert ok.content[0].text == "fine"


async def test_openenv_mcp_tool_client_in_production_mode_uses_its_own_http_session(server):
    from openenv.core.mcp_client import MCPToolClient

    client = MCPToolClient(base_url=server.url)
    client.use_production_mode = True  # JSON-RPC over HTTP /mcp with OpenEnv's session extension
    try:
        names = [tool.name for tool in await client.list_tools()]
        out = await client.call_tool("bash", command="echo production; pwd")
        sessions_open = (await asyncio.to_thread(server.health))["active_sessions"]
    finally:
        await client.close()
    assert names == ["bash", "read_file", "write_file", "str_replace", "submit"]
    assert out == "production\n/app"  # the result's `data`, as OpenEnv's client returns it
    assert sessions_open >= 1
