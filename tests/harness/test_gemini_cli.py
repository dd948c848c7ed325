"""Gemini CLI as a harness: installed from npm, driven over ACP (`gemini --acp`) in a no-network sandbox
against the proxy's Google `streamGenerateContent` endpoint, one ACP session across turns."""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness.harness_sandbox import HarnessSandbox

from evsys.agent.harness import HarnessEventType
from evsys.agent.harness.gemini_cli import DEFINITION, SETTINGS
from evsys.records import SandboxSpec
from evsys.task.loader import load_task

TASK_DIR = Path(__file__).parents[2] / "examples" / "tasks" / "create-file"


async def run_turns(proxy, messages: list[str]):
    """Run `messages` as turns of one Gemini CLI ACP session in a no-network sandbox with the create-file
    task; return the proxy session, the adapter, the turns, `ps` after stop() and the settings file."""
    task = load_task(TASK_DIR)
    spec = SandboxSpec(name="gemini-cli", workdir=task.environment.workdir, files=task.environment.files)
    async with HarnessSandbox(proxy, spec, install=DEFINITION.install, model="tiny") as hs:
        adapter = DEFINITION.build(hs.setup(session_timeout_s=240))
        turns = []
        try:
            await adapter.start()
            for message in messages:
                turns.append(await adapter.send_message(message))
        finally:
            await adapter.stop()
        ps = await hs.sandbox.exec("ps -eo args", timeout=20)
        settings = await hs.sandbox.exec(f"cat {hs.home}/.gemini/settings.json", timeout=20)
        return hs.session, adapter, turns, ps.stdout, settings.stdout


async def test_gemini_cli_runs_turns_over_acp_through_the_proxy(harness_proxy):
    """Gemini CLI answers `initialize` (naming itself), runs two prompts in one ACP session calling the model
    through the Google dialect (streaming, token ids recorded), the second request carries the first turn,
    every turn ends with TURN_COMPLETE (`end_turn`), and no gemini process survives stop()."""
    instruction = load_task(TASK_DIR).instruction
    session, adapter, turns, ps, settings = await run_turns(harness_proxy, [instruction, "Second: say hi."])
    assert adapter.agent_info["agentInfo"]["name"] == "gemini-cli"
    for turn in turns:
        assert turn.events[-1].type == HarnessEventType.TURN_COMPLETE and turn.ok, turn.error
        assert turn.events[-1].data["stop_reason"] in ("end_turn", "max_tokens")
        assert turn.of_type(HarnessEventType.LLM_RESPONSE) and turn.text
    calls = session.calls
    assert calls and all(c.dialect == "google" and c.stream and c.requested_model == "tiny" for c in calls)
    assert all(c.completion.prompt_token_ids and c.completion.completion_token_ids for c in calls)
    assert any(instruction.strip() in m["content"] for m in calls[0].messages if m["role"] == "user")
    assert calls[0].tools, "Gemini CLI declares its tools as functionDeclarations"
    last = json.dumps(calls[-1].messages)
    assert "Second: say hi." in last and json.dumps(instruction.strip())[1:-1] in last
    assert "gemini" not in ps
    assert json.loads(settings) == SETTINGS
