"""Harness mode (RFC 005) of a real `evsys serve`: one step is one turn of a real harness process in the
episode's sandbox, against a real (tiny, local) model; the turn's events stream as `event` frames."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import websockets
from openenv.core.generic_client import GenericEnvClient
from serve_process import start_serve, stop_serve

from evsys.testing.tiny_model import DEMO_GREETING, DEMO_GREETING_REPLY, DEMO_RECIPE, build_tiny_model

pytestmark = pytest.mark.slow

HARNESS_TESTS = Path(__file__).resolve().parents[1] / "harness"


@pytest.fixture(scope="module")
def harness_server(tmp_path_factory):
    """`evsys serve examples/tasks --harness <the tiny harness> -m local:<tiny model>`."""
    model = build_tiny_model(DEMO_RECIPE)
    served = start_serve(
        tmp_path_factory.mktemp("serve-harness"),
        "--harness", "stream_agents:TinyHarnessAgent",
        "-m", f"local:{model}",
        "--step-timeout", "120",
        import_path=HARNESS_TESTS,
    )  # fmt: skip
    yield served
    stop_serve(served)


@pytest.mark.needs_sandbox
async def test_a_harness_turn_streams_its_events_then_the_observation(harness_server):
    url = harness_server.url.replace("http://", "ws://") + "/ws"
    message = {"type": "message", "message": DEMO_GREETING[0]["content"]}
    async with websockets.connect(url) as ws:
        await ws.send(json.dumps({"type": "reset", "data": {"task": "create-file"}}))
        reset = json.loads(await ws.recv())
        assert reset["data"]["observation"]["metadata"]["harness"] == "tiny-harness"
        await ws.send(json.dumps({"type": "step", "data": message, "stream": True, "id": 7}))
        frames = []
        while True:
            frames.append(json.loads(await ws.recv()))
            if frames[-1]["type"] != "event":
                break
        await ws.send(json.dumps({"type": "step", "data": {"type": "call_tool", "tool_name": "submit"}}))
        final = json.loads(await ws.recv())
    kinds = [f["data"]["type"] for f in frames[:-1]]
    assert kinds[0] == "llm_request" and "llm_response" in kinds and kinds[-1] == "turn_complete"
    assert all(f["id"] == 7 for f in frames)
    turn = frames[-1]["data"]
    assert turn["observation"]["text"] == DEMO_GREETING_REPLY["content"] and turn["done"] is False
    assert "events" not in turn["observation"]  # they were streamed instead
    assert final["data"]["done"] is True and final["data"]["reward"] == 0.0  # greeting.txt was never written
    trial = final["data"]["observation"]["metadata"]["trial_name"]
    trajectory = json.loads((harness_server.job_dir / trial / "trajectory.json").read_text())
    agent_steps = [s for s in trajectory["steps"] if s["source"] == "agent"]
    assert agent_steps and agent_steps[0]["metrics"]["completion_token_ids"]  # the proxy's token-exact record
    assert (harness_server.job_dir / trial / "agent" / "harness-events.jsonl").is_file()


@pytest.mark.needs_sandbox
async def test_openenv_client_gets_the_turns_events_in_the_observation(harness_server):
    async with GenericEnvClient(base_url=harness_server.url, message_timeout_s=120) as env:
        await env.reset(task="create-file")
        first = await env.step({"type": "message", "message": DEMO_GREETING[0]["content"]})
        refused = await env.step({"type": "call_tool", "tool_name": "bash", "arguments": {"command": "ls"}})
        listed = await env.step({"type": "list_tools"})
    assert first.observation["text"] == DEMO_GREETING_REPLY["content"]
    assert first.observation["events"][-1]["type"] == "turn_complete"
    assert refused.observation["error"]["error_type"] == "tool_not_found"
    assert [tool["name"] for tool in listed.observation["tools"]] == ["submit"]
