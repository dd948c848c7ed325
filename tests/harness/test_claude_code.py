"""Claude Code as a harness: installed from npm, one long-lived stream-json process in a no-network sandbox
talking to the proxy's /v1/messages; its stream-json output and session file (captured fixtures, from
Claude Code 2.1.330 driven through the proxy by a scripted model) converted for evsys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness_episodes import harness_processes, harness_session, reset, say, submit
from harness_sandbox import HarnessSandbox

from evsys.agent.harness import EnvTool, HarnessEventType, HarnessStartError
from evsys.agent.harness.adapter import McpEndpoint
from evsys.agent.harness.catalog import HarnessSetup
from evsys.agent.harness.claude_code import (
    DEFINITION,
    QUIET_ENV,
    ClaudeCodeAdapter,
    build,
    native_log_to_steps,
)
from evsys.agent.harness.config import ModelEndpoint
from evsys.agent.harness.mcp_server import ToolOutput, serve_tools
from evsys.agent.harness.process import HostProcessLauncher
from evsys.agent.harness.stdio import ProtocolViolation
from evsys.records import SandboxSpec
from evsys.task.loader import load_task

DATA = Path(__file__).with_name("data")
TASK_DIR = Path(__file__).parents[2] / "examples" / "tasks" / "create-file"
STREAM = DATA / "claude-code-stream.jsonl"


def host_adapter(**options: object) -> ClaudeCodeAdapter:
    """An adapter as `-a claude-code` would build it (for checks that run no process)."""
    setup = HarnessSetup(
        launcher=HostProcessLauncher(),
        endpoint=ModelEndpoint("http://127.0.0.1:9", "evsys-key", "tiny"),
        bin_dir="/opt/evsys-harness/claude-code/node_modules/.bin",
        workdir="/app",
        home="/home/agent",
        mcp=McpEndpoint(url="http://127.0.0.1:9/mcp", headers={"Authorization": "Bearer evsys-key"}),
        options=dict(options),
    )
    return build(setup)


def stream_events(adapter: ClaudeCodeAdapter, lines: list[bytes]):
    events = []
    for line in lines:
        events.extend(adapter.to_events(adapter.parse_line(line)))
    return events


def test_stream_fixture_becomes_harness_events():
    """Three captured turns: text, the Bash call and its result, TURN_COMPLETE per result line; the third
    turn hit the output-token limit (the model's doing): Claude Code's API-error message as an ERROR, and
    the turn still ok, naming the limit."""
    adapter = host_adapter()
    events = stream_events(adapter, STREAM.read_bytes().splitlines())
    kinds = [e.type for e in events]
    assert kinds.count(HarnessEventType.TURN_COMPLETE) == 3 and kinds[-1] == HarnessEventType.TURN_COMPLETE
    first = kinds.index(HarnessEventType.TURN_COMPLETE) + 1
    assert kinds[:first] == [
        HarnessEventType.TEXT_OUTPUT,
        HarnessEventType.TOOL_CALL,
        HarnessEventType.TOOL_RESULT,
        HarnessEventType.TEXT_OUTPUT,
        HarnessEventType.TURN_COMPLETE,
    ]
    call, result = events[1].data, events[2].data
    assert call["name"] == "Bash" and call["arguments"]["command"] == "echo hi > hello.txt && cat hello.txt"
    assert result == {"id": call["id"], "output": "hi", "is_error": False}
    assert events[first - 1].data["status"] == "ok" and events[first - 1].data["num_turns"] == 2
    last_error = [e for e in events if e.type == HarnessEventType.ERROR][-1]
    assert last_error.data["kind"] == "api_error" and "output token maximum" in last_error.data["message"]
    assert events[-1].data["status"] == "ok" and events[-1].data["limit"] == "max_output_tokens"
    assert adapter.session_info["claude_code_version"] == "2.1.330"
    assert "Bash" in adapter.tool_names
    assert [r["type"] for r in adapter.native_log].count("result") == 3


def test_results_that_are_harness_failures_end_the_turn_with_an_error():
    """A refused key (the endpoint's fault) or an execution error is status "error", naming the harness;
    a line that is not JSON breaks the protocol."""
    adapter = host_adapter()
    captured = json.loads(STREAM.read_bytes().splitlines()[-1])
    refused = captured | {
        "api_error": "authentication_failed",
        "api_error_status": 401,
        "result": "Invalid key",
    }
    crashed = captured | {"subtype": "error_during_execution", "api_error": None, "result": None}
    for line in (refused, crashed):
        error, done = adapter.to_events(line)
        assert error.type == HarnessEventType.ERROR and error.data["kind"] == "harness"
        assert done.type == HarnessEventType.TURN_COMPLETE and done.data["status"] == "error"
        assert done.data["error"].startswith("harness 'claude-code': the turn failed")
    assert "Invalid key" in adapter.to_events(refused)[1].data["error"]
    with pytest.raises(ProtocolViolation, match="expected a JSON event line"):
        adapter.parse_line(b"Segmentation fault (core dumped)")


@pytest.mark.parametrize("fixture", ["claude-code-stream.jsonl", "claude-code-session.jsonl"])
def test_native_logs_become_atif_steps(fixture):
    """The stream-json output and Claude Code's session file give the same steps: the user's messages, one
    agent step per model response with its Bash call and the call's output as observation, the harness's
    'Output token limit hit' prompts and its API-error message as system steps."""
    lines = (DATA / fixture).read_text().splitlines()
    steps = native_log_to_steps([*lines, "{cut short"])
    assert [s.source for s in steps[:6]] == ["user", "agent", "agent", "user", "agent", "user"]
    assert steps[0].message == "Create a file hello.txt" and steps[3].message == "Second message: say hi"
    call_step = steps[1]
    assert call_step.message == "I will create it."
    [call] = call_step.tool_calls
    assert (
        call.function_name == "Bash" and call.arguments["command"] == "echo hi > hello.txt && cat hello.txt"
    )
    [result] = call_step.observation.results
    assert result.source_call_id == call.tool_call_id and result.content == "hi"
    assert call_step.metrics.prompt_tokens == 3
    assert steps[2].message == "Done: hello.txt says hi."
    assert [s.source for s in steps[6:]] == ["agent", "system"] * 4
    assert steps[7].message.startswith("Output token limit hit")
    assert steps[-1].message.startswith("API Error:")
    assert [s.step_id for s in steps] == list(range(1, len(steps) + 1))
    if fixture == "claude-code-session.jsonl":  # final usage: the completion counts are known
        assert call_step.metrics.completion_tokens == 2


def test_process_is_pointed_at_the_proxy_with_no_other_traffic():
    """Flags and environment only: base URL without /v1, the key as ANTHROPIC_API_KEY, the model for every
    role, the no-traffic switches, a writable HOME; the MCP file lists the server once tools are injected,
    and a tool named like a built-in is exposed as env_<name>."""
    adapter = host_adapter(extra_args=["--effort", "low"])
    argv = adapter.config.command
    assert argv[0] == "/opt/evsys-harness/claude-code/node_modules/.bin/claude"
    for flag in (
        "--input-format",
        "--output-format",
        "--dangerously-skip-permissions",
        "--strict-mcp-config",
    ):
        assert flag in argv
    assert argv[argv.index("--mcp-config") + 1] == adapter.config.mcp_config_path
    assert argv[argv.index("--model") + 1] == "tiny" and argv[-2:] == ["--effort", "low"]
    env = adapter.environment()
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9" and env["ANTHROPIC_API_KEY"] == "evsys-key"
    assert env["ANTHROPIC_MODEL"] == env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "tiny"
    assert env["HOME"] == "/home/agent" and "ANTHROPIC_AUTH_TOKEN" not in env
    assert QUIET_ENV.items() <= env.items() and env["DISABLE_TELEMETRY"] == "1"
    assert json.loads(adapter.render_mcp_config()) == {"mcpServers": {}}
    injected = adapter.inject_tools([EnvTool(name="bash"), EnvTool(name="lookup_fact")])
    assert [t.exposed_name for t in injected] == ["env_bash", "lookup_fact"]
    server = json.loads(adapter.render_mcp_config())["mcpServers"]["evsys-env"]
    assert server == {
        "type": "http",
        "url": "http://127.0.0.1:9/mcp",
        "headers": {"Authorization": "Bearer evsys-key"},
    }


# -- real runs in a no-network sandbox ----------------------------------------------------------------


def sandbox_spec(name: str) -> SandboxSpec:
    task = load_task(TASK_DIR)
    return SandboxSpec(name=name, workdir=task.environment.workdir, files=task.environment.files)


async def lookup_fact(name: str, arguments: dict) -> ToolOutput:
    """The dummy environment tool the MCP server serves."""
    return ToolOutput(text=f"fact about {arguments.get('topic', '?')}")


LOOKUP = EnvTool(
    name="lookup_fact",
    description="Look up a fact.",
    input_schema={"type": "object", "properties": {"topic": {"type": "string"}}},
)


async def claude_processes(hs: HarnessSandbox) -> list[str]:
    """The claude processes still running in the sandbox."""
    ps = await hs.sandbox.exec("ps -eo args", timeout=20)
    return [line for line in ps.stdout.splitlines() if "claude" in line]


async def test_claude_code_runs_a_turn_in_the_sandbox_through_the_proxy(harness_proxy):
    """Installed from npm, Claude Code runs in a no-network sandbox as the agent user, calls the model
    through /v1/messages (token ids recorded), sees the injected MCP tool, ends the turn with TURN_COMPLETE,
    and no claude process survives stop()."""
    instruction = load_task(TASK_DIR).instruction
    async with HarnessSandbox(harness_proxy, sandbox_spec("claude-code"), install=DEFINITION.install) as hs:
        adapter = DEFINITION.build(hs.setup(mcp=True, session_timeout_s=240, model="tiny"))
        adapter.inject_tools([LOOKUP])
        serve_tools(hs.session, adapter.injected_tools, lookup_fact)
        try:
            await adapter.start()
            turn = await adapter.send_message(instruction)
        finally:
            await adapter.stop()
        assert await claude_processes(hs) == []
        config = await hs.sandbox.exec(f"cat {adapter.config.mcp_config_path}", timeout=20)
    assert turn.events[-1].type == HarnessEventType.TURN_COMPLETE and turn.ok, turn.error
    calls = hs.session.calls
    assert calls and all(c.dialect == "anthropic" and c.requested_model == "tiny" for c in calls)
    assert calls[0].completion.prompt_token_ids and calls[0].completion.completion_token_ids
    users = [m["content"] for m in calls[0].messages if m["role"] == "user"]
    assert any(instruction.strip() in str(text) for text in users)
    assert len(turn.of_type(HarnessEventType.LLM_RESPONSE)) == len(calls) and turn.text
    assert "mcp__evsys-env__lookup_fact" in adapter.tool_names
    assert json.loads(config.stdout)["mcpServers"]["evsys-env"]["url"] == hs.endpoint.base_url + "/mcp"
    assert (
        adapter.session_info["cwd"] == "/app" and adapter.session_info["apiKeySource"] == "ANTHROPIC_API_KEY"
    )


async def test_second_turn_sees_the_first(tmp_path, long_context_client):
    """A two-turn harness episode (`evsys serve --harness claude-code`): the same Claude Code process answers
    both, the second turn's model request carries the first turn's message and reply, and no harness process
    outlives the episode."""
    first, second = "First: remember the word kumquat.", "Second: say the word."
    options = {"max_tokens_cap": 24}
    async with harness_session(
        tmp_path, "claude-code", long_context_client, harness_options=options, step_timeout_sec=240
    ) as session:
        await reset(session)
        one, _, _ = await say(session, first)
        plumbing = session.episode.agent.harness.plumbing
        calls = plumbing.session.calls
        calls_after_first = len(calls)
        two, _, _ = await say(session, second)
        await submit(session)
    assert harness_processes() == []
    assert one.metadata["turn_status"] == two.metadata["turn_status"] == "ok"
    first_reply = calls[calls_after_first - 1].completion.text
    later = calls[calls_after_first:]
    assert later, "the second turn made no model call"
    text = json.dumps(later[0].messages)
    assert first in text and second in text and json.dumps(first_reply)[1:-1] in text


async def test_a_harness_that_cannot_start_is_a_clear_error(harness_proxy):
    """Claude Code rejecting its command line exits before it is ready: HarnessStartError says so, with
    its stderr, and nothing is left running."""
    async with HarnessSandbox(
        harness_proxy, sandbox_spec("claude-code-bad"), install=DEFINITION.install
    ) as hs:
        adapter = DEFINITION.build(hs.setup(extra_args=["--no-such-flag"]))
        with pytest.raises(
            HarnessStartError, match=r"'claude-code' exited with code \d+ before it was ready"
        ):
            await adapter.start()
        await adapter.stop()
        assert await claude_processes(hs) == []
