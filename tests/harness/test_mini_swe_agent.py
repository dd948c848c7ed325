"""mini-swe-agent as a harness: installed from PyPI, run for one turn in a no-network sandbox against the
proxy's chat-completions endpoint; its trajectory file (a captured fixture) converted into events and ATIF
steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness_sandbox import HarnessSandbox

from evsys.agent.harness import HarnessEventType, HarnessStartError, HarnessStateError
from evsys.agent.harness.config import EnvTool, HarnessConfig, ModelEndpoint
from evsys.agent.harness.mini_swe_agent import (
    DEFINITION,
    MiniSweAgentAdapter,
    exit_status,
    native_log_to_steps,
    render_config,
    trajectory_events,
)
from evsys.records import SandboxSpec
from evsys.task.loader import load_task

E = HarnessEventType
DATA = Path(__file__).with_name("data")
TASK_DIR = Path(__file__).parents[2] / "examples" / "tasks" / "create-file"


def fixture_trajectory() -> dict:
    """A real trajectory of the installed mini (step limit 2) against the demo tiny model through the proxy,
    with `-c agent.system_template= -c agent.instance_template={{task}} -c model.model_kwargs.temperature=0`:
    its first reply is a bash call with broken arguments, its second plain text; mini rejects both."""
    return json.loads((DATA / "mini-trajectory.json").read_text())


# mini's trajectory format ("mini-swe-agent-1.1") for a reply it accepted: the assistant message with its tool
# calls, then the tool message with the command's output (constructed: the tiny models never produce one)
ACCEPTED_CALL = {
    "trajectory_format": "mini-swe-agent-1.1",
    "info": {"exit_status": "Submitted", "submission": ""},
    "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Create hello.txt"},
        {
            "role": "assistant",
            "content": "Creating it.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                }
            ],
            "extra": {"response": {"usage": {"prompt_tokens": 10, "completion_tokens": 4}}, "cost": 0.0},
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"returncode": 0, "output": "a.txt"}'},
        {"role": "exit", "content": "", "extra": {"exit_status": "Submitted", "submission": ""}},
    ],
}


def test_captured_trajectory_becomes_atif_steps():
    """Each model reply is an agent step with its token counts, also the replies mini rejected (rebuilt from
    the raw response it keeps with the format-error message), followed by that message as a user step."""
    data = fixture_trajectory()
    steps = native_log_to_steps(json.dumps(data))
    assert [s.source for s in steps] == ["system", "user", "agent", "user", "agent", "user"]
    assert [s.step_id for s in steps] == [1, 2, 3, 4, 5, 6]
    assert steps[1].message == "List the files in the current directory."
    [call] = steps[2].tool_calls
    assert call.function_name == "bash" and set(call.arguments) == {"raw"}  # unparseable arguments kept
    assert (steps[2].metrics.prompt_tokens, steps[2].metrics.completion_tokens) == (184, 25)
    assert steps[3].message.startswith("Tool call error:")
    assert steps[4].message.startswith('{"name"') and steps[4].metrics.completion_tokens == 48
    assert exit_status(data) == "LimitsExceeded"
    assert native_log_to_steps(b"[]") == [] and native_log_to_steps({"messages": "?"}) == []


def test_accepted_tool_call_becomes_an_agent_step_with_its_observation():
    """An accepted bash call: the agent step carries the call and, as observation, the command's output."""
    system, user, agent = native_log_to_steps(ACCEPTED_CALL)
    assert (system.source, user.source, agent.source) == ("system", "user", "agent")
    [call] = agent.tool_calls
    assert (call.tool_call_id, call.function_name, call.arguments) == ("c1", "bash", {"command": "ls"})
    [result] = agent.observation.results
    assert result.source_call_id == "c1" and "a.txt" in result.content
    assert agent.message == "Creating it." and agent.metrics.completion_tokens == 4
    events = trajectory_events(ACCEPTED_CALL, 1)
    assert [e.type for e in events] == [E.TEXT_OUTPUT, E.TOOL_CALL, E.TOOL_RESULT]
    assert events[1].data == {"id": "c1", "name": "bash", "command": "ls"}
    assert events[2].data["id"] == "c1" and "a.txt" in events[2].data["output"]


def test_captured_trajectory_becomes_harness_events():
    """Rejected replies: their text as TEXT_OUTPUT, then ERROR kind format_error with mini's message."""
    events = trajectory_events(fixture_trajectory(), 1)
    assert [e.type for e in events] == [E.ERROR, E.TEXT_OUTPUT, E.ERROR]
    assert events[0].data["kind"] == "format_error" and "Error parsing tool call" in events[0].data["message"]
    assert events[1].data["text"].startswith('{"name"')
    assert {e.turn for e in events} == {1}


def test_config_points_litellm_at_the_proxy():
    """litellm's OpenAI provider at <base>/v1, cost tracking tolerant of unknown models, limits set."""
    text = render_config(base_url="http://127.0.0.1:9/", model="tiny", step_limit=3, wall_time_limit=90)
    config = json.loads(text)
    assert config["model"]["model_name"] == "openai/tiny"
    assert config["model"]["model_kwargs"]["api_base"] == "http://127.0.0.1:9/v1"
    assert config["model"]["cost_tracking"] == "ignore_errors"
    assert config["agent"] == {
        "step_limit": 3,
        "cost_limit": 0,
        "wall_time_limit_seconds": 90,
        "mode": "yolo",
        "confirm_exit": False,
    }


async def test_environment_tools_are_refused(tmp_path):
    """mini has no MCP client: injected environment tools fail start() with a clear message."""
    config = HarnessConfig(
        name="mini-swe-agent", command=["/opt/mini/bin/mini"], working_directory=str(tmp_path)
    )
    adapter = MiniSweAgentAdapter(
        config, home=str(tmp_path), endpoint=ModelEndpoint("http://127.0.0.1:9", "k", "tiny")
    )
    adapter.inject_tools([EnvTool(name="lookup")])
    with pytest.raises(HarnessStartError, match=r"'mini-swe-agent' has no MCP client.*lookup"):
        await adapter.start()


async def test_mini_runs_a_turn_in_the_sandbox_through_the_proxy(harness_proxy):
    """Installed from PyPI, mini runs in a no-network sandbox, calls the model through /v1/chat/completions
    (token ids recorded), the turn ends with TURN_COMPLETE, its trajectory converts to ATIF, a second turn is
    refused, and no mini process survives stop()."""
    task = load_task(TASK_DIR)
    spec = SandboxSpec(name="mini-harness", workdir=task.environment.workdir, files=task.environment.files)
    async with HarnessSandbox(harness_proxy, spec, install=DEFINITION.install, model="tiny") as hs:
        adapter = DEFINITION.build(hs.setup(session_timeout_s=180, step_limit=2))
        try:
            await adapter.start()
            turn = await adapter.send_message(task.instruction)
            with pytest.raises(HarnessStateError, match="one task per process"):
                await adapter.send_message("and now something else")
        finally:
            await adapter.stop()
        ps = await hs.sandbox.exec("ps -eo args", timeout=20)
        session = hs.session
    assert turn.events[-1].type == E.TURN_COMPLETE and turn.ok, f"{turn.error}\n{adapter.stdout_tail}"
    assert session.calls and all(c.dialect == "openai" for c in session.calls)
    completion = session.calls[0].completion
    assert completion.prompt_token_ids and completion.completion_token_ids
    assert any(task.instruction.strip() in str(m.get("content")) for m in session.calls[0].messages)
    assert len(turn.of_type(E.LLM_RESPONSE)) == len(session.calls) <= 2
    assert adapter.trajectory is not None and adapter.exit_status
    assert turn.events[-1].data["exit_status"] == adapter.exit_status  # e.g. LimitsExceeded
    steps = native_log_to_steps(adapter.trajectory)
    native = await adapter.native_steps()  # what a trial writes to agent/native-trajectory.json
    assert [s.model_dump(exclude={"timestamp"}) for s in native] == [
        s.model_dump(exclude={"timestamp"}) for s in steps
    ]
    agent_steps = [s for s in steps if s.source == "agent"]
    assert len(agent_steps) == len(session.calls)
    assert [s.metrics.completion_tokens for s in agent_steps] == [
        c.completion.usage.completion_tokens for c in session.calls
    ]
    assert {e.data["kind"] for e in turn.of_type(E.ERROR)} <= {"format_error"}  # the trajectory was read
    assert ps.ok and "forwarder.py" in ps.stdout and "mini" not in ps.stdout
