"""Codex CLI as a harness: installed from npm, run per turn in a no-network sandbox against the proxy's
Responses endpoint; its `--json` events and its session log (captured fixtures) converted for evsys."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from harness_sandbox import HarnessSandbox

from evsys.agent.harness import HarnessEventType
from evsys.agent.harness.adapter import McpEndpoint
from evsys.agent.harness.codex import (
    API_KEY_VAR,
    DEFINITION,
    CodexAdapter,
    native_log_to_steps,
    render_config,
)
from evsys.agent.harness.config import HarnessConfig
from evsys.agent.harness.stdio import ProtocolViolation
from evsys.records import SandboxSpec
from evsys.task.loader import load_task

DATA = Path(__file__).with_name("data")
TASK_DIR = Path(__file__).parents[2] / "examples" / "tasks" / "create-file"


def adapter_for_parsing() -> CodexAdapter:
    config = HarnessConfig(name="codex", command=["/opt/evsys-harness/codex/node_modules/.bin/codex"])
    return CodexAdapter(config, home="/home/agent")


def test_native_log_fixture_becomes_atif_steps():
    """The captured rollout: system and user messages, an agent step with its text, its exec_command call,
    the command's output as observation and its token counts, then the final agent message."""
    lines = (DATA / "codex-rollout.jsonl").read_text().splitlines()
    steps = native_log_to_steps([*lines, "{cut short"])
    assert [s.source for s in steps] == ["system", "user", "user", "agent", "agent"]
    assert steps[2].message == "Create a file hello.txt"
    call_step = steps[3]
    assert call_step.message == "I will create it."
    [call] = call_step.tool_calls
    assert call.function_name == "exec_command"
    assert call.arguments == {"cmd": "echo hi > hello.txt && cat hello.txt"}
    [result] = call_step.observation.results
    assert result.source_call_id == call.tool_call_id and result.content.endswith("Output:\nhi\n")
    assert (call_step.metrics.prompt_tokens, call_step.metrics.completion_tokens) == (3, 2)
    assert steps[4].message == "Done (reply 2)." and steps[4].metrics.completion_tokens == 1
    assert [s.step_id for s in steps] == [1, 2, 3, 4, 5]


def test_exec_json_fixture_becomes_harness_events():
    """`codex exec --json` lines: the metadata warning, text, the command as TOOL_CALL / TOOL_RESULT."""
    adapter = adapter_for_parsing()
    events = []
    for line in (DATA / "codex-exec.jsonl").read_bytes().splitlines():
        events.extend(adapter.parse_line(line, 1))
    assert [e.type for e in events] == [
        HarnessEventType.ERROR,
        HarnessEventType.TEXT_OUTPUT,
        HarnessEventType.TOOL_CALL,
        HarnessEventType.TOOL_RESULT,
        HarnessEventType.TEXT_OUTPUT,
    ]
    assert events[0].data["kind"] == "warning"
    assert events[1].data["text"] == "I will create it."
    assert "echo hi > hello.txt" in events[2].data["command"]
    assert events[3].data["output"] == "hi\n" and events[3].data["exit_code"] == 0
    assert adapter.thread_id and adapter.usage["output_tokens"] == 3
    failed = adapter.parse_line(b'{"type":"turn.failed","error":{"message":"stream closed"}}', 2)
    assert failed[0].type == HarnessEventType.ERROR and failed[0].data["message"] == "stream closed"
    with pytest.raises(ProtocolViolation, match="expected a codex JSON event line"):
        adapter.parse_line(b"Segmentation fault", 1)


def test_config_points_at_the_proxy_and_declares_the_mcp_server():
    """config.toml: the evsys provider on the Responses wire API at <base>/v1, no sandbox or approvals,
    telemetry off, and the MCP server with its bearer header (values with quotes stay valid TOML)."""
    mcp = McpEndpoint(url="http://127.0.0.1:9/mcp", headers={"Authorization": 'Bearer k"1'})
    text = render_config(
        base_url="http://127.0.0.1:9",
        model="m",
        mcp_servers={mcp.server_name: {"type": "http", "url": mcp.url, "headers": mcp.headers}},
    )
    config = tomllib.loads(text)
    provider = config["model_providers"][config["model_provider"]]
    assert provider["base_url"] == "http://127.0.0.1:9/v1" and provider["wire_api"] == "responses"
    assert provider["env_key"] == API_KEY_VAR
    assert config["sandbox_mode"] == "danger-full-access" and config["approval_policy"] == "never"
    assert config["analytics"]["enabled"] is False and config["otel"]["exporter"] == "none"
    server = config["mcp_servers"]["evsys-env"]
    assert server == {"url": "http://127.0.0.1:9/mcp", "http_headers": {"Authorization": 'Bearer k"1'}}
    assert "mcp_servers" not in tomllib.loads(render_config(base_url="http://x", model="m"))


async def run_turns(proxy, messages: list[str]):
    """Run `messages` as consecutive turns of Codex in a no-network sandbox with the create-file task; return
    the proxy session, the turns, `ps` after stop() and the native steps."""
    task = load_task(TASK_DIR)
    spec = SandboxSpec(name="codex-harness", workdir=task.environment.workdir, files=task.environment.files)
    async with HarnessSandbox(proxy, spec, install=DEFINITION.install, model="tiny") as hs:
        adapter = DEFINITION.build(hs.setup(session_timeout_s=180))
        turns = []
        try:
            await adapter.start()
            for message in messages:
                turns.append(await adapter.send_message(message))
        finally:
            await adapter.stop()
        ps = await hs.sandbox.exec("ps -eo args", timeout=20)
        native = await adapter.native_steps()  # Codex's own rollout log, read out of the sandbox
        return hs.session, turns, ps.stdout, native


async def test_codex_runs_a_turn_in_the_sandbox_through_the_proxy(harness_proxy):
    """Installed from npm, Codex runs in a no-network sandbox, calls the model through /v1/responses (token
    ids recorded), the turn ends with TURN_COMPLETE, and no codex process survives stop()."""
    instruction = load_task(TASK_DIR).instruction
    session, [turn], ps, native = await run_turns(harness_proxy, [instruction])
    assert turn.events[-1].type == HarnessEventType.TURN_COMPLETE and turn.ok, turn.error
    assert session.calls and all(c.dialect == "responses" for c in session.calls)
    completion = session.calls[0].completion
    assert completion.prompt_token_ids and completion.completion_token_ids
    assert instruction.strip() in [m["content"].strip() for m in session.calls[0].messages]
    assert turn.of_type(HarnessEventType.LLM_RESPONSE) and turn.text
    assert "codex" not in ps
    assert instruction.strip() in [(s.message or "").strip() for s in native if s.source == "user"]
    assert any(s.source == "agent" for s in native)


async def test_second_turn_resumes_the_first(harness_proxy):
    """Turn 2 (`codex exec resume --last`) sends the first turn's message and reply along with the new one."""
    session, turns, _, _ = await run_turns(
        harness_proxy, ["First: remember the word kumquat.", "Second: say it."]
    )
    assert all(t.ok for t in turns), [t.error for t in turns]
    first_reply = session.calls[0].completion.text
    last = [m["content"] for m in session.calls[-1].messages]
    assert "First: remember the word kumquat." in last and "Second: say it." in last
    assert first_reply in last
