"""The ACP client (`-a acp:<command>`): a real ACP agent process in a no-network sandbox whose permission,
file and terminal requests evsys serves inside the sandbox as the agent user, and whose model calls go
through the recording proxy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from acp.schema import PermissionOption
from harness_sandbox import HarnessSandbox

from evsys.agent.harness import HarnessEventType, HarnessStartError
from evsys.agent.harness.acp_client import grant_permission
from evsys.agent.harness.agent import HarnessAgent
from evsys.agent.harness.catalog import get_definition
from evsys.agent.registry import agent_plugin
from evsys.records import Bind, SandboxSpec

AGENT = Path(__file__).with_name("tiny_acp_agent.py")
IN_SANDBOX = "/opt/evsys-test/tiny_acp_agent.py"
WORKDIR = "/app"


def option(kind: str) -> PermissionOption:
    return PermissionOption(option_id=f"id-{kind}", name=kind, kind=kind)


def test_permission_policy_grants_once_and_cancels_without_an_allow_option():
    """allow_once is preferred over allow_always; a request offering only rejections is cancelled."""
    both = grant_permission([option("reject_once"), option("allow_always"), option("allow_once")])
    assert both.outcome.outcome == "selected" and both.outcome.option_id == "id-allow_once"
    always = grant_permission([option("reject_always"), option("allow_always")])
    assert always.outcome.option_id == "id-allow_always"
    assert grant_permission([option("reject_once")]).outcome.outcome == "cancelled"


def test_acp_command_names_resolve_to_harness_agents():
    """`acp:<command>` is a harness agent (not a module:Class), its argv split like a shell would."""
    agent = agent_plugin("acp:/usr/bin/my-agent --acp 'two words'").factory()
    assert isinstance(agent, HarnessAgent) and agent.definition.install is None
    assert agent.name == "acp:/usr/bin/my-agent --acp 'two words'"
    with pytest.raises(ValueError, match="give the ACP agent's command"):
        get_definition("acp:  ")


async def run_agent(proxy, *args: str, messages: list[str]):
    """Run the tiny ACP agent via `-a acp:...` in a no-network sandbox; the proxy session, the adapter, the
    turns and `ls -l hello.txt` afterwards."""
    command = f"acp:/usr/bin/python3 -I {IN_SANDBOX} {' '.join(args)}"
    definition = get_definition(command)
    spec = SandboxSpec(name="acp-client", workdir=WORKDIR, binds=[Bind(src=AGENT, dst=IN_SANDBOX)])
    async with HarnessSandbox(proxy, spec, model="tiny") as hs:
        adapter = definition.build(hs.setup(session_timeout_s=120))
        try:
            await adapter.start()
            turns = [await adapter.send_message(m) for m in messages]
        finally:
            await adapter.stop()
        listing = await hs.sandbox.exec(f"stat -c '%U %s' {WORKDIR}/hello.txt", timeout=20)
        return hs.session, adapter, turns, listing.stdout.strip()


async def test_the_session_updates_become_native_steps(proxy):
    """`native_steps()`: per turn the prompt as a user step, then an agent step with the streamed text, the
    announced tool call and its reported result as the observation."""
    session, adapter, _, _ = await run_agent(proxy, messages=["Say hello.", "Again."])
    steps = await adapter.native_steps()
    assert [s.source for s in steps] == ["user", "agent", "user", "agent"]
    assert steps[0].message == "Say hello." and steps[1].message == session.calls[0].completion.text
    [call] = steps[1].tool_calls
    assert call.function_name == "write hello.txt" and call.arguments == {"path": "hello.txt"}
    [result] = steps[1].observation.results
    assert result.source_call_id == call.tool_call_id and "hi from acp" in result.content


def tool_result(turn) -> dict:
    [result] = turn.of_type(HarnessEventType.TOOL_RESULT)
    return result.data["output"]


async def test_requests_are_served_in_the_sandbox_as_the_agent_user(proxy):
    """Two turns of one session: the permission is granted (allow_once), the file is written in the
    sandbox as the agent user and read back, the terminal runs there as that user, the permission decision
    is an event, the model calls are recorded with token ids and the second carries the first turn."""
    session, adapter, turns, listing = await run_agent(proxy, messages=["Say hello.", "Again."])
    assert adapter.agent_info["agentInfo"]["name"] == "tiny-acp-agent"
    assert all(t.ok and t.events[-1].data["stop_reason"] == "end_turn" for t in turns), [
        t.error for t in turns
    ]
    result = tool_result(turns[0])
    assert result["permission"] == {"outcome": {"outcome": "selected", "optionId": "once"}}
    assert result["read"] == {"content": "hi from acp\n"}
    assert result["exit"]["exitCode"] == 0 and result["output"] == "agent\nhi from acp\n"
    assert listing == "agent 12"
    [decision] = [
        e.data["permission"] for e in turns[0].of_type(HarnessEventType.TOOL_CALL) if "permission" in e.data
    ]
    assert decision["chosen"] == "once" and decision["options"] == [
        "allow_always",
        "allow_once",
        "reject_once",
    ]
    assert [c.dialect for c in session.calls] == ["openai", "openai"]
    assert all(c.completion.prompt_token_ids and c.completion.completion_token_ids for c in session.calls)
    assert turns[0].text == session.calls[0].completion.text
    assert json.dumps("Say hello.") in json.dumps(session.calls[1].messages)


async def test_file_writes_cannot_reach_what_the_agent_user_cannot(proxy):
    """The harness asks the client to write a root-owned file: the request fails with a JSON-RPC error while
    the same turn's write inside the workdir (the positive control) succeeded."""
    _, _, [turn], listing = await run_agent(proxy, "--write", "/etc/passwd", messages=["Say hello."])
    assert turn.ok, turn.error
    assert listing == "agent 12"
    attempt = tool_result(turn)["write_attempt"]
    assert attempt["ok"] is False and attempt["error"]["code"] == -32603


async def test_a_command_that_is_not_an_acp_agent_fails_to_start_clearly(proxy):
    """A command that exits at once is a HarnessStartError naming the exit, with its stderr."""
    definition = get_definition("acp:/bin/sh -c 'echo no acp here >&2; exit 3'")
    async with HarnessSandbox(proxy, SandboxSpec(name="acp-bad", workdir=WORKDIR), model="tiny") as hs:
        adapter = definition.build(hs.setup())
        with pytest.raises(HarnessStartError, match=r"exited with code 3.*no acp here"):
            await adapter.start()
        await adapter.stop()
