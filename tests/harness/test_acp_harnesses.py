"""ACP harnesses (Gemini CLI, opencode, OpenClaw): each installed from npm into the harness cache, driven over
ACP in a no-network sandbox against the recording proxy, one ACP session across two turns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness_sandbox import HarnessSandbox

from evsys.agent.harness import HarnessEventType
from evsys.agent.harness.catalog import get_definition
from evsys.records import SandboxSpec
from evsys.task.loader import load_task

TASK_DIR = Path(__file__).parents[2] / "examples" / "tasks" / "create-file"
SECOND = "Second: say hi."
# a turn that ended normally; the untrained model's text can end one early (Gemini CLI's loop detection
# answers max_turn_requests when the random text repeats itself)
FINISHED = ("end_turn", "max_tokens", "max_turn_requests")
HARNESSES = {
    # name: (the dialect it speaks, its name in ACP `initialize`, its config file under HOME)
    "gemini-cli": ("google", "gemini-cli", ".gemini/settings.json"),
    "opencode": ("openai", "OpenCode", ".config/opencode/opencode.json"),
    "openclaw": ("openai", "openclaw-acp", ".openclaw/openclaw.json"),
}


async def run_turns(proxy, name: str, messages: list[str]):
    """Run `messages` as turns of one ACP session of harness `name` in a no-network sandbox with the
    create-file task; return the proxy session, the adapter, the turns, `ps` after stop() and the config."""
    definition = get_definition(name)
    task = load_task(TASK_DIR)
    spec = SandboxSpec(name=name, workdir=task.environment.workdir, files=task.environment.files)
    async with HarnessSandbox(proxy, spec, install=definition.install, model="tiny") as hs:
        adapter = definition.build(hs.setup(session_timeout_s=240))
        turns = []
        try:
            await adapter.start()
            for message in messages:
                turns.append(await adapter.send_message(message))
        finally:
            await adapter.stop()
        ps = await hs.sandbox.exec("ps -eo args", timeout=20)
        config = await hs.sandbox.exec(f"cat {hs.home}/{HARNESSES[name][2]}", timeout=20)
        return hs.session, adapter, turns, ps.stdout, json.loads(config.stdout)


@pytest.mark.parametrize("name", sorted(HARNESSES))
async def test_acp_harness_runs_turns_through_the_proxy(harness_proxy, name):
    """The harness answers `initialize` (naming itself), runs two prompts in one ACP session calling the model
    through its dialect (token ids recorded for every call), the second request carries the first turn, every
    turn ends with TURN_COMPLETE and an ACP stop reason, and no harness process survives stop()."""
    dialect, agent_name, _ = HARNESSES[name]
    instruction = load_task(TASK_DIR).instruction
    session, adapter, turns, ps, config = await run_turns(harness_proxy, name, [instruction, SECOND])
    assert adapter.agent_info["agentInfo"]["name"] == agent_name
    for turn in turns:
        assert turn.events[-1].type == HarnessEventType.TURN_COMPLETE and turn.ok, turn.error
        assert turn.events[-1].data["stop_reason"] in FINISHED
        assert turn.of_type(HarnessEventType.LLM_RESPONSE) and turn.text
    calls = session.calls
    assert calls and all(c.dialect == dialect and c.requested_model == "tiny" for c in calls)
    assert all(c.completion.prompt_token_ids and c.completion.completion_token_ids for c in calls)
    prompts = [json.dumps(c.messages) for c in calls]
    assert any(json.dumps(instruction.strip())[1:-1] in p for p in prompts)
    assert any(c.tools for c in calls), "the harness declares its tools"
    assert any(SECOND in p and json.dumps(instruction.strip())[1:-1] in p for p in prompts)
    assert adapter.config.command[0].rpartition("/")[2] not in ps
    assert config, "the harness's config file was written"
