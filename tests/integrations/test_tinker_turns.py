"""tinker-cookbook envs over a Python task that chooses its tools, adds a custom one and answers the model's
turns with a respond hook (the guessing game of tests/rl/author_hooks.py), driven by the cookbook's own
`do_group_rollout` with a scripted policy: the env offers exactly the task's tools, refuses a built-in the
task left out, runs the custom tool host-side with evsys's argument validation, puts the hook's reply in the
next observation, and ends when the hook is done with the verifier's reward. In-memory sandbox backend."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("tinker_cookbook.rl.rollouts", reason="tinker-cookbook is not installed (evsys[tinker])")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rl"))  # author_hooks: the tools and the hook

from author_hooks import CALLS, SERVED_ROW, game_dataset
from test_tinker_envs import RENDERER, ScriptedPolicy, trials
from tinker_cookbook import tokenizer_utils
from tinker_cookbook.rl.rollouts import do_group_rollout

from evsys.integrations.tinker import EvsysRLDataset
from evsys.testing.tiny_model import DEMO_RECIPE, build_tiny_model

NO_SUBMIT = {**SERVED_ROW, "id": "game-no-submit", "tools": ["author_hooks:capital"], "max_turns": 2}
"""The game with the custom tool only (no submit) and two turns: the hook hears the last one too."""


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return build_tiny_model(DEMO_RECIPE)


def offered_tools(prompt: str) -> dict[str, dict]:
    """The tools the rendered prompt shows the model (its Hermes `<tools>` block), by name."""
    block = re.search(r"<tools>\n(.*?)</tools>", prompt, re.S)
    assert block is not None, prompt
    functions = [json.loads(line)["function"] for line in block.group(1).strip().splitlines()]
    return {function["name"]: function for function in functions}


def agent_tool_calls(trial_dir: Path) -> list[str]:
    """The tool calls the trial recorded (what reached the episode)."""
    trajectory = json.loads((trial_dir / "trajectory.json").read_text())
    return [call["function_name"] for step in trajectory["steps"] for call in step.get("tool_calls") or []]


async def test_env_offers_the_tasks_tools_and_the_hooks_replies(
    model_dir: Path, tmp_path: Path, memory_backend
):
    CALLS.clear()
    dataset = await EvsysRLDataset.create(
        game_dataset(tmp_path / "game"),
        model_name=str(model_dir),
        renderer_name=RENDERER,
        group_size=1,
        jobs_dir=tmp_path / "jobs",
        sandbox=memory_backend(),
    )
    script = [
        ("bash", {"command": "echo pwned"}),  # a built-in the task left out
        ("capital", {"country": 3}),  # the custom tool, with an argument its signature refuses
        ("capital", {"country": "Japan"}),
        "4",  # the model's turn for the hook ("higher")
        "7",  # the hook is done: the number is guessed
    ]
    async with dataset:
        [builder] = dataset.get_batch(0)
        group = await do_group_rollout(builder, ScriptedPolicy(model_dir, script))
    decode = tokenizer_utils.get_tokenizer(str(model_dir)).decode
    [trajectory] = group.trajectories_G
    obs = [decode(t.ob.to_ints()) for t in trajectory.transitions]
    tools = offered_tools(obs[0])
    assert list(tools) == ["submit", "capital"]  # the task's choice: no sandbox tools, its custom one
    assert tools["capital"]["description"] == "The capital city of a country."
    assert tools["capital"]["parameters"]["required"] == ["country"]
    assert "Tool 'bash' not found" in obs[1]
    assert "error: capital: country: Input should be a valid string" in obs[2]
    assert obs[3].endswith("<tool_response>\nTokyo\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert obs[4].endswith("<|im_start|>user\nhigher<|im_end|>\n<|im_start|>assistant\n")  # the hook's reply
    assert CALLS == [("capital", ("Japan", False))]  # host-side; the refused arguments never ran it
    assert [t.episode_done for t in trajectory.transitions] == [False] * 4 + [True]
    assert group.get_total_rewards() == [1.0]  # the verifier's: the last answer is 7
    assert trajectory.transitions[-1].metrics["stop/completed"] == 1.0
    [trial] = trials(tmp_path / "jobs")
    assert trial["reward"] == 1.0 and trial["agent_metadata"]["ended_by"] == "environment_done"
    [trial_dir] = (tmp_path / "jobs").glob("*/game*")
    assert agent_tool_calls(trial_dir) == ["capital", "capital"]  # bash never reached the episode


@pytest.mark.timeout(120)  # an episode nothing ends waits forever
async def test_the_last_turn_of_a_task_without_submit_is_heard(
    model_dir: Path, tmp_path: Path, memory_backend
):
    """The task's max_turns (2, not the dataset's 10) bounds the env; its last turn, with no submit to carry
    it, goes to the hook: a right guess there ends the game (1.0), a wrong one ends the episode (0.0)."""
    dataset = await EvsysRLDataset.create(
        game_dataset(tmp_path / "game", NO_SUBMIT),
        model_name=str(model_dir),
        renderer_name=RENDERER,
        group_size=1,
        jobs_dir=tmp_path / "jobs",
        sandbox=memory_backend(),
    )
    async with dataset:
        [builder] = dataset.get_batch(0)
        solved = await do_group_rollout(builder, ScriptedPolicy(model_dir, ["4", "7"]))
        missed = await do_group_rollout(builder, ScriptedPolicy(model_dir, ["4", "5"]))
    assert (solved.get_total_rewards(), missed.get_total_rewards()) == ([1.0], [0.0])
    [last] = missed.trajectories_G[0].transitions[-1:]
    assert last.episode_done and last.metrics["stop/max_turns"] == 1.0
    ended = sorted(t["agent_metadata"]["ended_by"] for t in trials(tmp_path / "jobs"))
    assert ended == ["client_finished", "environment_done"]
