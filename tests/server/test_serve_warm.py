"""`evsys serve --warm-sandboxes N`: after a task's first reset the server keeps N started sandboxes of its
environment ready, and the next client's episode runs in one of them like in any other sandbox."""

from __future__ import annotations

import pytest
from openenv.core.generic_client import GenericEnvClient
from serve_process import start_serve, stop_serve

pytestmark = pytest.mark.slow


def call(tool: str, **arguments) -> dict:
    """An OpenEnv call_tool action."""
    return {"type": "call_tool", "tool_name": tool, "arguments": arguments}


@pytest.mark.needs_sandbox
async def test_a_served_task_keeps_warm_sandboxes_ready_for_the_next_episode(tmp_path, eventually):
    served = start_serve(tmp_path, "--warm-sandboxes", "2")
    try:
        async with GenericEnvClient(base_url=served.url) as first:
            await first.reset(task="create-file")
            await eventually(lambda: served.health()["idle_sandboxes"] == 2, "two warm sandboxes ready")
            async with GenericEnvClient(base_url=served.url) as second:
                await second.reset(task="create-file")
                listed = await second.step(call("bash", command="ls -A /app; echo listed"))
                await second.step(call("write_file", path="/app/greeting.txt", content="Hello from evsys!\n"))
                final = await second.step(call("submit"))
        assert listed.observation["result"]["data"].split() == ["listed"]  # as started: nothing left in /app
        assert final.done is True and final.reward == 1.0
        await eventually(lambda: served.health()["idle_sandboxes"] >= 2, "the pool refilled")
    finally:
        stop_serve(served)
