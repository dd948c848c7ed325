"""TRL's `environment_factory` over a Python task that chooses its tools, adds a custom one and answers the
model's turns with a respond hook: the environment TRL gets offers exactly the task's tools (the methods
TRL reads from its class, rendered by transformers into the task's schemas), runs them with evsys's argument
validation, and its `reply` tool carries the model's turns to the hook and the hook's answers back."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="TRL is not installed (pip install 'evsys[trl]')")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "rl"))  # author_hooks: the tools and the hook

from author_hooks import CALLS, SERVED_ROW, game_dataset
from trl_grpo import changed, recorded, train_on_episodes

from evsys.integrations.episodes import BAD_REPLY
from evsys.integrations.trl import EnvironmentFactory
from evsys.integrations.trl.environment import EPISODE_OVER


def trl_tools(environment: object) -> dict:
    """The environment's tools as GRPOTrainer collects them: its class's public functions but reset and
    get_reward, bound to the instance."""
    members = inspect.getmembers(type(environment), predicate=inspect.isfunction)
    names = [n for n, _ in members if n not in ("reset", "get_reward") and not n.startswith("_")]
    return {name: getattr(environment, name) for name in names}


def test_the_environment_offers_the_tasks_tools_and_the_hooks_turns(tmp_path, memory_backend):
    from transformers.utils import get_json_schema

    CALLS.clear()
    factory = EnvironmentFactory(
        game_dataset(tmp_path / "game"), jobs_dir=tmp_path / "jobs", sandbox=memory_backend()
    )
    try:
        environment = factory()
        tools = trl_tools(environment)
        # the task's choice (no bash: it left the sandbox tools out), its custom tool, and its turns
        assert sorted(tools) == ["capital", "reply", "submit"]
        capital = get_json_schema(tools["capital"])["function"]
        assert capital["description"] == "The capital city of a country."
        assert capital["parameters"]["properties"]["country"] == {
            "type": "string",
            "description": "A country's English name",
        }
        assert capital["parameters"]["required"] == ["country"]

        assert environment.reset(task="game", prompt=[]) == SERVED_ROW["prompt"]
        # evsys validates the model's arguments: the function never runs with a wrong one
        assert environment.capital(country=3).startswith("Error: capital: country")
        assert environment.capital(country="Japan", extra=1).startswith("Error: capital: extra")
        assert CALLS == []
        assert environment.capital(country="Japan") == "Tokyo"
        assert CALLS == [("capital", ("Japan", False))]
        # the model's turns reach the respond hook, its answers come back as the tool's result
        assert environment.reply(message="4") == "higher"
        assert environment.reply(message="7") == EPISODE_OVER
        assert environment.capital(country="France") == EPISODE_OVER
        assert environment.get_reward() == 1.0
        assert environment.result is not None
        assert environment.result.agent_metadata["ended_by"] == "environment_done"
    finally:
        factory.close()


def test_tasks_offering_different_tools_are_refused(tmp_path, memory_backend):
    other = {**SERVED_ROW, "id": "plain", "tools": ["submit"], "respond": None}
    with pytest.raises(ValueError, match="offer different tools"):
        dataset = game_dataset(tmp_path / "two", SERVED_ROW, other)
        EnvironmentFactory(dataset, jobs_dir=tmp_path / "jobs", sandbox=memory_backend())


@pytest.mark.timeout(120)
def test_get_reward_ends_an_episode_whose_task_offers_no_submit(tmp_path, memory_backend):
    """The model's last turn ends such a task under `-a loop`; through TRL, get_reward ends it the same way
    (no failure: the verifier scores the turns so far)."""
    chat_only = {**SERVED_ROW, "tools": ["author_hooks:capital"]}
    dataset = game_dataset(tmp_path / "game", chat_only)
    factory = EnvironmentFactory(dataset, jobs_dir=tmp_path / "jobs", sandbox=memory_backend())
    try:
        environment = factory()
        assert sorted(trl_tools(environment)) == ["capital", "reply"]
        environment.reset(task="game")
        assert environment.reply(message="4") == "higher"
        assert environment.reply(message="") == "Error: " + BAD_REPLY
        assert environment.get_reward() == 0.0  # the last guess was 4: wrong, scored
        assert environment.result is not None and environment.result.failure is None
        assert environment.result.agent_metadata["ended_by"] == "client_finished"
    finally:
        factory.close()


def reply_policy(instruction: str, tools: dict) -> Path:
    """A tiny model taught to answer the game's prompt with `reply(message="7")`, seeing the environment's
    tools as TRL renders them (at temperature 1 it does so in most samples, not all)."""
    from transformers.utils import get_json_schema

    from evsys.testing.tiny_model import TinyModelRecipe, TrainingChat, build_tiny_model

    call = {"name": "reply", "arguments": '{"message": "7"}'}
    answer = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": call}],
    }
    chat = TrainingChat(
        messages=[{"role": "user", "content": instruction}, answer],
        tools=[get_json_schema(tool) for tool in tools.values()],
    )
    return build_tiny_model(TinyModelRecipe(chats=[chat], train_steps=150))


@pytest.mark.slow
@pytest.mark.needs_model
@pytest.mark.timeout(900)  # the first run builds the tiny policy
def test_grpo_trains_on_the_games_turns(tmp_path, memory_backend):
    """GRPOTrainer renders the task's tools, runs the model's `reply` calls through the respond hook and
    optimises the verifier's reward of the game."""
    dataset = game_dataset(tmp_path / "game")
    factory = EnvironmentFactory(dataset, jobs_dir=tmp_path / "jobs", sandbox=memory_backend(), max_steps=4)
    try:
        model_dir = reply_policy(factory.runner.instruction("game"), trl_tools(factory()))
    except BaseException:
        factory.close()
        raise
    trainer, before = train_on_episodes(factory, model_dir, tmp_path / "out")
    trials = recorded(factory.runner.job_dir)
    assert len(trials) == 8 and all(t.failure is None for t in trials), [t.failure for t in trials]
    # a sample that said 7 ended the game through the hook (scored 1); the others were submitted unsolved
    ended = {(t.agent_metadata.get("ended_by"), t.reward) for t in trials}
    assert ended == {("environment_done", 1.0), ("submit", 0.0)}, ended
    logged = [e["rewards/EvsysTrlEnvironment/mean"] for e in trainer.state.log_history if "loss" in e]
    rewards = [t.reward for t in trials]
    assert logged == pytest.approx([sum(rewards[0:4]) / 4, sum(rewards[4:8]) / 4])
    assert changed(before, trainer.model)
