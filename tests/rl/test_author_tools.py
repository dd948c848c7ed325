"""`VerifiedTask(tools=[...])`: built-in names restrict what the model is offered and can call, Python
functions are custom tools (schema from the signature, validated arguments, run host-side, bounded), and
unknown names are refused when the task is built. Scripted model, in-memory sandbox: no engine, no bwrap."""

from __future__ import annotations

from pathlib import Path

import pytest
from author_hooks import CALLS, add, capital, slow
from pydantic import ValidationError

from evsys import VerifiedTask, run_rollouts
from evsys.agent.base import AgentContext
from evsys.agent.host_tools import HostTools
from evsys.agent.loop import LoopAgent
from evsys.engine.spec import python_task_as_task
from evsys.records import AgentInfo, SandboxSpec, ToolCall, TrajectoryRecorder
from evsys.sandbox import sandbox_class
from evsys.testing.scripted_model import ScriptedModelClient, tool_call


def _names(schemas) -> list[str]:
    return [schema["function"]["name"] for schema in schemas or []]


def test_an_unknown_tool_name_is_refused_naming_the_known_ones():
    with pytest.raises(ValidationError, match=r"unknown tool 'teleport': known tools are bash, read_file"):
        VerifiedTask(id="a", prompt="p", verifier="v", sandbox=True, tools=["teleport"])
    with pytest.raises(ValidationError, match=r"mcp__geo__<tool>"):  # the task's own servers are named
        VerifiedTask(
            id="a",
            prompt="p",
            verifier="v",
            sandbox=True,
            tools=["mcp__maps__route"],
            mcp_servers=[{"name": "geo", "command": "geo-server"}],
        )
    with pytest.raises(ValidationError, match="cannot be imported by name"):
        VerifiedTask(id="a", prompt="p", verifier="v", tools=[lambda city: city])
    with pytest.raises(ValidationError, match=r"tools need a sandbox \(bash\)"):
        VerifiedTask(id="a", prompt="p", verifier="v", tools=["bash", capital])
    with pytest.raises(ValidationError, match="'capital' is offered twice"):
        VerifiedTask(id="a", prompt="p", verifier="v", tools=[capital, "author_hooks:capital"])


def test_a_custom_tool_is_stored_by_name_and_its_schema_comes_from_its_signature_and_docstring():
    task = VerifiedTask(id="a", prompt="p", verifier="v", tools=[capital, add, "submit"])
    assert task.tools == [f"{capital.__module__}:capital", f"{add.__module__}:add", "submit"]
    again = VerifiedTask.model_validate_json(task.model_dump_json())  # a worker elsewhere loads it again
    assert again.tools == task.tools
    host = HostTools.for_task(task.interaction, None, call_timeout=5, max_output_chars=1000)
    schema = host.schemas()[0]["function"]
    assert schema["name"] == "capital" and schema["description"] == "The capital city of a country."
    assert schema["parameters"]["required"] == ["country"]
    assert schema["parameters"]["properties"]["country"]["description"] == "A country's English name"
    assert schema["parameters"]["properties"]["upper"]["type"] == "boolean"
    assert schema["parameters"]["additionalProperties"] is False


async def _run_loop(task: VerifiedTask, client: ScriptedModelClient, sandbox=None) -> TrajectoryRecorder:
    recorder = TrajectoryRecorder("t", AgentInfo(name="loop"))
    ctx = AgentContext(
        task=python_task_as_task(task, Path.cwd()),
        trial_name="t",
        logs_dir=Path("/nonexistent"),
        trajectory=recorder,
        model_name="scripted",
        model_client=client,
    )
    await LoopAgent(max_turns=6).run(task.prompt, sandbox, ctx)
    return recorder


async def test_the_model_cannot_call_a_built_in_tool_the_task_left_out(memory_backend):
    """Positive control first: without a selection the model's bash call runs in the sandbox; with
    tools=["read_file", "submit"] it is neither offered nor run (nothing reaches the sandbox)."""
    backend = sandbox_class(memory_backend())
    marker = "touch /tmp/escaped"
    for tools, runs in ((None, True), (["read_file", "submit"], False)):
        box = backend(SandboxSpec(name="author-tools"))
        await box.start()
        task = VerifiedTask(id="a", prompt="p", verifier="v", sandbox=True, tools=tools)
        client = ScriptedModelClient(tool_call("bash", command=marker), tool_call("submit"))
        recorder = await _run_loop(task, client, box)
        await box.stop()
        assert bool(box.commands) is runs  # the model's bash call reached the sandbox
        offered = _names(client.requests[0].tools)
        assert ("bash" in offered) is runs
        if not runs:
            assert offered == ["read_file", "submit"]
            result = recorder.steps[-2].observation.results[0].content
            assert result == "error: unknown tool 'bash'; available: read_file, submit"


async def test_a_custom_tool_runs_host_side_with_validated_arguments():
    CALLS.clear()
    task = VerifiedTask(id="a", prompt="p", verifier="v", tools=[capital, add, "submit"])
    client = ScriptedModelClient(
        tool_call("capital", country="France", upper="yes"),  # pydantic's lax bool: "yes" -> True
        tool_call("capital", country=["__import__('os').system('id')"]),  # not a string: never called
        tool_call("add", a=2, b="3", c=4),  # an unknown argument: never called
        tool_call("add", a=2, b="3"),
        tool_call("submit"),
    )
    recorder = await _run_loop(task, client)
    results = [s.observation.results[0].content for s in recorder.steps if s.observation]
    assert results[0] == "PARIS"
    assert results[1].startswith("error: capital: country: Input should be a valid string")
    assert results[2] == "error: add: c: Extra inputs are not permitted"
    assert results[3] == '{"sum": 5}'
    assert CALLS == [("capital", ("France", True)), ("add", (2, 3))]  # the refused calls never ran
    assert _names(client.requests[0].tools) == ["submit", "capital", "add"]


async def test_a_custom_tool_past_the_call_limit_is_an_error_the_model_sees():
    task = VerifiedTask(id="a", prompt="p", verifier="v", tools=[slow])
    host = HostTools.for_task(task.interaction, None, call_timeout=0.1, max_output_chars=1000)
    outcome = await host.call(ToolCall(tool_call_id="c", function_name="slow", arguments={"seconds": 0.5}))
    assert outcome.is_error and outcome.content == "error: slow did not finish within 0.1 s"


async def test_run_rollouts_offers_and_scores_a_task_with_a_custom_tool(tmp_path):
    CALLS.clear()
    task = VerifiedTask(
        id="capital",
        prompt="What is the capital of Japan?",
        verifier="author_hooks:guesses_left",
        tools=[capital],
        max_turns=3,
    )
    client = ScriptedModelClient(tool_call("capital", country="Japan"), "Tokyo, 7 million")
    groups = await run_rollouts([task], model=client, jobs_dir=tmp_path, max_retries=0)
    sample = groups[0].trajectories[0]
    assert sample.error is None and sample.reward == 1.0
    assert CALLS == [("capital", ("Japan", False))]
    assert _names(client.requests[0].tools) == ["capital"]
    answer = client.requests[1].messages[-1]
    assert answer["role"] == "tool" and answer["content"] == "Tokyo"
    assert _names(sample.trajectory.agent.tool_definitions) == ["capital"]
