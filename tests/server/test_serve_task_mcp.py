"""`evsys serve` serves a task's MCP servers as `evsys run -a loop` offers them: OpenEnv's own client lists
the task's tool beside the built-in ones and calls it; the call runs in the episode's sandbox (the task's
server logs it there, and the task's test reads that log: reward 1)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.mcp_client import MCPToolClient
from serve_process import start_serve, stop_serve

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))  # mcp_facts: the MCP facts task
from mcp_facts import ANSWER, TASK_DIR, TOOL_NAME

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # the task's image may be built first
BUILT_IN = ["bash", "read_file", "write_file", "str_replace", "submit"]


@pytest.fixture(scope="module")
def facts_server(tmp_path_factory):
    """A server over the mcp-facts task (its stdio MCP server ships in the task's image)."""
    served = start_serve(tmp_path_factory.mktemp("serve-mcp"), dataset=TASK_DIR)
    yield served
    stop_serve(served)


async def test_the_tasks_mcp_tool_is_listed_and_called_in_the_sandbox(facts_server):
    async with MCPToolClient(base_url=facts_server.url, message_timeout_s=120) as env:
        first = await env.reset(task="mcp-facts")
        names = [tool.name for tool in await env.list_tools()]
        answer = await env.call_tool(TOOL_NAME, topic="kumquat")
        final = await env.step(CallToolAction(tool_name="submit", arguments={}))
    assert names == [*BUILT_IN, TOOL_NAME]
    assert first.observation.metadata["tools"] == names
    assert answer == ANSWER  # the task server's reply
    assert final.done is True and final.reward == 1.0  # the server's log of the call, read in the sandbox
    trial = facts_server.trial_result(final.observation.metadata["trial_name"])
    assert trial["reward"] == 1.0 and trial["failure"] is None


async def test_a_task_without_the_call_scores_0_and_unknown_tools_are_still_refused(facts_server):
    async with MCPToolClient(base_url=facts_server.url, message_timeout_s=120) as env:
        await env.reset(task="mcp-facts")
        with pytest.raises(RuntimeError, match=r"unknown tool.*mcp__facts__nope"):
            await env.call_tool("mcp__facts__nope", topic="kumquat")
        final = await env.step(CallToolAction(tool_name="submit", arguments={}))
    assert final.done is True and final.reward == 0.0  # nothing looked up: the test sees no call
