"""The loop agent with a real (tiny, trained) model in a real local sandbox: it solves create-file through
`evsys run`, records token-exact turns, and turns malformed calls, unknown tools and huge outputs into counted
error observations."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evsys.agent.base import AgentContext
from evsys.agent.loop import ELIDED, LoopAgent, prefix_check
from evsys.agent.tools import TOOL_SCHEMAS
from evsys.model.base import Completion
from evsys.records import AgentInfo, TrajectoryRecorder
from evsys.testing.tiny_model import TinyModelRecipe, TrainingChat, build_tiny_model

REPO = Path(__file__).resolve().parents[2]
CREATE_FILE = REPO / "examples" / "tasks" / "create-file"
BIG_OUTPUT = "Print a very long line of letters."
UNKNOWN_TOOL = "Use the teleport tool."
BROKEN_JSON = "Run ls but write broken JSON."
GREETING = {"path": "/app/greeting.txt", "content": "Hello from evsys!\n"}
BIG_COMMAND = "head -c 10000000 /dev/zero | tr '\\0' a"
# The agent shows the model at most this many characters of a tool output (its `max_output_chars`); kept
# small so the scripted training chat holding the clipped 10 MB output stays short and trains quickly.
CLIP_CHARS = 1_000

# Building the trained fixture model takes 1-2 minutes on 2 busy cores; leave room on slower machines.
pytestmark = pytest.mark.timeout(900)


def _call(name: str, arguments: dict) -> dict:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c", "type": "function", "function": function}],
    }


def _episode(instruction: str, first: dict, observation: str) -> list[TrainingChat]:
    """Two training chats: the first move, then `submit` after seeing `observation`."""
    start = LoopAgent().initial_messages(instruction)
    tool = {"role": "tool", "tool_call_id": "c", "content": observation}
    return [
        TrainingChat(messages=[*start, first], tools=TOOL_SCHEMAS),
        TrainingChat(messages=[*start, first, tool, _call("submit", {})], tools=TOOL_SCHEMAS),
    ]


def loop_recipe() -> TinyModelRecipe:
    """A tiny model scripted to play four loop-agent episodes (create-file and three kinds of bad call)."""
    from evsys.agent.tools import bash_observation, clip
    from evsys.model.render import parse_tool_calls
    from evsys.records import DEFAULT_MAX_OUTPUT_BYTES, ExecResult

    instruction = (CREATE_FILE / "instruction.md").read_text()
    kept = DEFAULT_MAX_OUTPUT_BYTES  # the sandbox keeps the first and last halves of the 10 MB
    cut = ExecResult(
        exit_code=0, stdout_bytes=b"a" * kept, stdout_total_bytes=10_000_000, stdout_head_bytes=kept // 2
    )
    big = clip(bash_observation(cut, 120.0), CLIP_CHARS)
    broken = {
        "role": "assistant",
        "content": '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"\n</tool_call>',
    }
    parse_error = parse_tool_calls(broken["content"])[1][0].parse_error
    names = ", ".join(t["function"]["name"] for t in TOOL_SCHEMAS)
    chats = [
        *_episode(instruction, _call("write_file", GREETING), "wrote 18 bytes to /app/greeting.txt"),
        *_episode(BIG_OUTPUT, _call("bash", {"command": BIG_COMMAND}), big),
        *_episode(
            UNKNOWN_TOOL,
            _call("teleport", {"to": "mars"}),
            f"error: unknown tool 'teleport'; available: {names}",
        ),
        *_episode(BROKEN_JSON, broken, f"error: could not parse your tool call: {parse_error}"),
    ]
    return TinyModelRecipe(chats=chats, context_window=8192, train_steps=300, seed=1)


@pytest.fixture(scope="module")
def loop_model() -> Path:
    """The scripted tiny model (built once, cached by recipe hash)."""
    return build_tiny_model(loop_recipe())


def test_prefix_check_reports_the_first_differing_token():
    """A turn whose prompt re-tokenises history differently is a recorded break, with the index."""
    first = Completion(text="", prompt_token_ids=[1, 2, 3], completion_token_ids=[4, 5])
    good = Completion(text="", prompt_token_ids=[1, 2, 3, 4, 5, 6, 7])
    bad = Completion(text="", prompt_token_ids=[1, 2, 3, 4, 9, 6])
    assert prefix_check(first, good) == (True, None)
    assert prefix_check(first, bad) == (False, 4)
    assert prefix_check(None, good) == (None, None)


def test_bad_settings_name_the_field():
    """An invalid agent kwarg fails with a message naming it."""
    with pytest.raises(ValueError, match="max_turns"):
        LoopAgent(max_turns=0)
    with pytest.raises(ValueError, match="no_such_option"):
        LoopAgent(no_such_option=1)


@pytest.mark.needs_process
def test_loop_solves_create_file_through_evsys_run(loop_model, tmp_path):
    """`evsys run create-file -a loop -m local:<tiny>` reaches reward 1.0 with token-exact turns recorded."""
    jobs = tmp_path / "jobs"
    args = [
        sys.executable,
        "-m",
        "evsys.cli.main",
        "run",
        str(CREATE_FILE),
        "-a",
        "loop",
        "-m",
        f"local:{loop_model}",
    ]
    args += ["--agent-kwarg", "temperature=0", "--jobs-dir", str(jobs), "--job-name", "loop", "-k", "2"]
    args += ["--agent-timeout-multiplier", "10"]  # two greedy turns; a busy shared machine must not time out
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    trials = sorted((jobs / "loop").glob("*/result.json"))
    assert len(trials) == 2
    token_runs = []
    for result_path in trials:
        result = json.loads(result_path.read_text())
        assert result["rewards"] == {"reward": 1.0}, result
        trajectory = json.loads((result_path.parent / "trajectory.json").read_text())
        agent_steps = [s for s in trajectory["steps"] if s["source"] == "agent"]
        assert [s["tool_calls"][0]["function_name"] for s in agent_steps] == ["write_file", "submit"]
        for step in agent_steps:
            m = step["metrics"]
            assert len(m["loss_mask"]) == len(m["completion_token_ids"]) == len(m["logprobs"]) > 0
            assert set(m["loss_mask"]) == {1}
        assert agent_steps[1]["metrics"]["extends_previous"] is True
        assert trajectory["agent"]["tool_definitions"] == TOOL_SCHEMAS  # what the model was offered
        token_runs.append([s["metrics"]["completion_token_ids"] for s in agent_steps])
    assert token_runs[0] == token_runs[1], "greedy runs differ"
    export = [sys.executable, "-m", "evsys.cli.main", "export", str(jobs / "loop"), "-f", "sft"]
    subprocess.run([*export, "-o", str(tmp_path / "sft")], check=True, capture_output=True, timeout=300)
    rows = [json.loads(line) for line in (tmp_path / "sft" / "sft.jsonl").read_text().splitlines()]
    assert rows and all(row["tools"] == TOOL_SCHEMAS for row in rows)  # tool-calling SFT needs the schemas


async def _run_agent(loop_model: Path, instruction: str, **kwargs) -> tuple[dict, list]:
    from evsys.model.local.client import LocalModelClient
    from evsys.records import SandboxSpec
    from evsys.sandbox import LocalSandbox
    from evsys.task.loader import load_task

    task = load_task(CREATE_FILE)
    recorder = TrajectoryRecorder("s", AgentInfo(name="loop"))
    async with LocalSandbox(SandboxSpec(name="loop-test", workdir="/app")) as sandbox:
        await sandbox.exec("mkdir -p /app && chmod 777 /app", user="root")
        ctx = AgentContext(
            task=task,
            trial_name="t",
            logs_dir=Path("/nonexistent"),
            trajectory=recorder,
            model_client=LocalModelClient(str(loop_model)),
        )
        agent = LoopAgent(temperature=0, max_output_chars=CLIP_CHARS, **kwargs)
        result = await agent.run(instruction, sandbox, ctx)
    assert recorder.agent.tool_definitions == TOOL_SCHEMAS  # the trajectory says what the model was offered
    return result.metadata, recorder.steps


@pytest.mark.needs_sandbox
async def test_huge_tool_output_is_clipped(loop_model):
    """A 10 MB bash output reaches the model as a clipped observation; the run goes on to submit."""
    stats, steps = await _run_agent(loop_model, BIG_OUTPUT)
    first = steps[2]
    assert first.tool_calls[0].arguments == {"command": BIG_COMMAND}
    shown = first.observation.results[0].content
    assert len(shown) < CLIP_CHARS + 100 and "characters omitted" in shown
    assert shown.endswith("[stdout was 10,000,000 bytes; its middle is omitted above]")  # the true size
    assert stats["stop_reason"] == "submitted" and stats["tool_errors"] == 0


@pytest.mark.needs_sandbox
async def test_unknown_tool_and_broken_json_become_counted_error_observations(loop_model):
    """Neither crashes the run: each is an error observation, counted, and the model then submits."""
    stats, steps = await _run_agent(loop_model, UNKNOWN_TOOL)
    assert "unknown tool 'teleport'" in steps[2].observation.results[0].content
    assert stats["unknown_tools"] == 1 and stats["stop_reason"] == "submitted"
    stats, steps = await _run_agent(loop_model, BROKEN_JSON)
    assert steps[2].tool_calls[0].parse_error
    assert "could not parse your tool call" in steps[2].observation.results[0].content
    assert stats["parse_errors"] == 1 and stats["stop_reason"] == "submitted"


@pytest.mark.needs_sandbox
async def test_context_overflow_elides_old_outputs_then_stops(loop_model):
    """With a window too small for the big output, the oldest observation is elided, recorded and counted."""
    _, plain = await _run_agent(loop_model, BIG_OUTPUT)
    first, second = (s.metrics.prompt_tokens for s in plain if s.source == "agent")
    window = 8192  # loop_recipe's context_window
    budget = window - second + 1  # turn 1 fits, turn 2 (with the big output) does not
    assert first + budget <= window
    stats, steps = await _run_agent(loop_model, BIG_OUTPUT, max_tokens=budget, max_turns=3)
    assert stats["context_elisions"] == 1 and stats["stop_reason"] == "submitted"  # eliding made room
    elided = [s.metrics.prompt_tokens for s in steps if s.source == "agent"][1]
    assert first < elided < second  # what the model saw in turn 2: the output replaced by the marker
    budget = window - elided + 1  # now not even the elided prompt fits
    stats, steps = await _run_agent(loop_model, BIG_OUTPUT, max_tokens=budget, max_turns=3)
    assert stats["context_elisions"] == 1
    assert stats["stop_reason"] == "context_window"
    events = [e for s in steps for e in (getattr(s, "context_events", None) or [])]
    assert "elided the oldest tool output" in events[0] and "context window full" in events[-1]
    assert steps[-1].source == "system" and "context window" in steps[-1].message
    agent_steps = [s for s in steps if s.source == "agent"]
    assert ELIDED not in agent_steps[0].observation.results[0].content  # the record keeps what the model saw
