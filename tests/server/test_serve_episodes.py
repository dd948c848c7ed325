"""Episodes through a real `evsys serve`, driven by OpenEnv's own client (`openenv-core` from PyPI)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient
from serve_process import start_serve, stop_serve

from evsys.viewer.jobdata import load_job

pytestmark = pytest.mark.slow

GREETING = "Hello from evsys!\n"


def call(tool: str, **arguments) -> dict:
    """An OpenEnv call_tool action."""
    return {"type": "call_tool", "tool_name": tool, "arguments": arguments}


async def test_episode_reaches_reward_1_through_tool_actions_and_is_recorded(server):
    async with GenericEnvClient(base_url=server.url) as env:
        first = await env.reset(task="create-file")
        assert first.done is False and "/app/greeting.txt" in first.observation["instruction"]
        assert first.observation["task"] == "evsys/create-file"  # picked by its short name
        wrote = await env.step(call("write_file", path="/app/greeting.txt", content=GREETING))
        assert wrote.done is False and wrote.reward is None
        shown = await env.step(call("bash", command="cat greeting.txt && pwd"))
        assert shown.observation["result"]["data"] == "Hello from evsys!\n/app"
        final = await env.step(call("submit", message="done"))
        state = await env.state()
    assert final.done is True and final.reward == 1.0
    assert final.observation["metadata"]["rewards"] == {"reward": 1.0}
    assert state["done"] is True and state["step_count"] == 3 and state["reward"] == 1.0
    trial = state["trial_name"]
    result = server.trial_result(trial)
    assert result["reward"] == 1.0 and result["failure"] is None and result["agent"] == "openenv-client"
    trajectory = json.loads((server.job_dir / trial / "trajectory.json").read_text())
    calls = [s["tool_calls"][0]["function_name"] for s in trajectory["steps"] if s.get("tool_calls")]
    assert calls == ["write_file", "bash", "submit"]
    job = load_job(server.job_dir)  # what `evsys view` and `evsys jobs show` read
    assert job.config_error is None and trial in {t.trial_name for t in job.trials}


async def test_episode_with_wrong_work_scores_0(server):
    async with GenericEnvClient(base_url=server.url) as env:
        await env.reset(task="create-file")
        await env.step(call("write_file", path="/app/greeting.txt", content="Goodbye\n"))
        final = await env.step(call("submit"))
    assert final.done is True and final.reward == 0.0
    assert server.trial_result(final.observation["metadata"]["trial_name"])["reward"] == 0.0


async def test_reset_starts_a_clean_sandbox_each_episode(server):
    async with GenericEnvClient(base_url=server.url) as env:
        await env.reset(task="create-file")
        await env.step(call("write_file", path="/app/greeting.txt", content=GREETING))
        await env.reset(task="create-file")  # the first episode is left: still verified and recorded
        seen = await env.step(call("bash", command="ls /app/greeting.txt"))
    assert "No such file" in seen.observation["result"]["data"]  # the new episode's sandbox is clean


async def test_sixteen_concurrent_sessions_each_in_their_own_sandbox(server):
    async def episode(i: int) -> tuple[float, str]:
        async with GenericEnvClient(base_url=server.url, message_timeout_s=120) as env:
            await env.reset(task="create-file")
            await env.step(call("bash", command=f"echo {i} > /tmp/mine"))
            await asyncio.sleep(0.2)  # every session has written before any reads back
            mine = await env.step(call("bash", command="cat /tmp/mine"))
            content = GREETING if i % 2 == 0 else "wrong\n"
            await env.step(call("write_file", path="/app/greeting.txt", content=content))
            final = await env.step(call("submit"))
            return final.reward, mine.observation["result"]["data"]

    results = await asyncio.gather(*(episode(i) for i in range(16)))
    assert [data for _, data in results] == [str(i) for i in range(16)]
    assert [reward for reward, _ in results] == [1.0 if i % 2 == 0 else 0.0 for i in range(16)]


async def test_openenv_mcp_tool_client_lists_and_calls_tools_over_ws(server):
    async with MCPToolClient(base_url=server.url) as env:
        await env.reset(task="create-file")
        names = [tool.name for tool in await env.list_tools()]
        out = await env.call_tool("bash", command="echo via-mcp-client")
    assert names == ["bash", "read_file", "write_file", "str_replace", "submit"]
    assert out == "via-mcp-client"


async def test_seed_picks_tasks_in_catalog_order_and_unknown_task_is_an_error(server):
    async with httpx.AsyncClient() as http:
        tasks = (await http.get(f"{server.url}/metadata")).json()["tasks"]
    async with GenericEnvClient(base_url=server.url) as env:
        picked = await env.reset(seed=len(tasks) + 1)
        assert picked.observation["task"] == tasks[1]
        with pytest.raises(RuntimeError, match="no task named 'nope'"):
            await env.reset(task="nope")


def test_schema_metadata_health_and_stateless_http(server):
    schema = httpx.get(f"{server.url}/schema").json()
    assert set(schema) == {"action", "observation", "state"}
    assert {"call_tool", "list_tools"} <= set(json.dumps(schema["action"]).split('"'))
    assert "instruction" in schema["observation"]["properties"]
    health = httpx.get(f"{server.url}/health").json()
    assert health["status"] == "healthy" and health["max_sessions"] == 64
    reset = httpx.post(f"{server.url}/reset", json={"task": "create-file"}).json()
    assert reset["done"] is False and "greeting" in reset["observation"]["instruction"]
    action = call("write_file", path="/app/greeting.txt", content=GREETING)
    step = httpx.post(f"{server.url}/step", json={"task": "create-file", "action": action}, timeout=60)
    body = step.json()
    assert step.status_code == 200 and body["done"] is True and body["reward"] == 1.0


@pytest.mark.needs_process
async def test_python_task_dataset_scores_the_submitted_answer_and_a_restart_keeps_the_job(
    tmp_path, examples_dir
):
    served = start_serve(tmp_path, dataset=examples_dir / "math")
    try:
        async with GenericEnvClient(base_url=served.url) as env:
            first = await env.reset(task="math-000")
            assert "15-1" in first.observation["instruction"]
            computed = await env.step(call("bash", command="echo $((15-1))"))
            right = await env.step(call("submit", message=computed.observation["result"]["data"]))
            await env.reset(task="math-000")
            wrong = await env.step(call("submit", message="15"))
    finally:
        stop_serve(served)
    assert (right.reward, wrong.reward) == (1.0, 0.0)
    served = start_serve(tmp_path, dataset=examples_dir / "math")  # the same job directory again
    try:
        async with GenericEnvClient(base_url=served.url) as env:
            await env.reset(task="math-001")
            again = await env.step(call("submit", message="80"))
    finally:
        stop_serve(served)
    names = [o.observation["metadata"]["trial_name"] for o in (right, wrong, again)]
    assert len(set(names)) == 3 and again.reward == 1.0
    rewards = [json.loads((served.job_dir / n / "result.json").read_text())["reward"] for n in names]
    assert rewards == [1.0, 0.0, 1.0]  # the first run's episodes were not overwritten
    job = json.loads((served.job_dir / "result.json").read_text())
    assert job["n_done"] == 3 and job["finished_at"] is not None
