"""TRL's GRPOTrainer trains a tiny model on an evsys task through `environment_factory`
(evsys.integrations.trl.EvsysTrlEnvironment): each rollout is an evsys episode in a sandbox, the model's tool
calls run there, and the reward TRL optimises is the task's verifier's."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("trl", reason="TRL is not installed (pip install 'evsys[trl]')")

from trl_grpo import TASKS, changed, recorded, train_on_episodes

from evsys.integrations.trl import EnvironmentFactory, EvsysTrlEnvironment
from evsys.testing.tiny_model import TinyModelRecipe, TrainingChat, build_tiny_model

TOOLS = ("bash", "read_file", "str_replace", "write_file")


def tool_schemas() -> list[dict]:
    """The schemas TRL renders for the environment's tools (from their type hints and docstrings)."""
    from transformers.utils import get_json_schema

    return [get_json_schema(getattr(EvsysTrlEnvironment, name)) for name in TOOLS]


def touch_policy(instruction: str) -> Path:
    """A tiny model taught to answer the task's prompt with `bash("touch done.txt")` (at temperature 1 it
    does so in most samples, not all: the group's rewards differ, so GRPO has something to learn)."""
    reply = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "touch done.txt"}'},
            }
        ],
    }
    chat = TrainingChat(messages=[{"role": "user", "content": instruction}, reply], tools=tool_schemas())
    return build_tiny_model(TinyModelRecipe(chats=[chat], train_steps=150))


def test_tool_schemas_come_from_the_loop_agents_tools() -> None:
    schemas = {s["function"]["name"]: s["function"] for s in tool_schemas()}
    assert set(schemas) == set(TOOLS)
    assert schemas["bash"]["parameters"]["properties"]["command"]["description"] == "The command line to run."
    assert schemas["write_file"]["parameters"]["required"] == ["path", "content"]


@pytest.mark.needs_sandbox
@pytest.mark.slow
@pytest.mark.timeout(900)  # the first run builds the tiny policy
def test_grpo_trains_on_episodes_in_evsys_sandboxes(tmp_path: Path) -> None:
    factory = EnvironmentFactory(TASKS / "create-done", jobs_dir=tmp_path / "jobs", max_steps=4)
    try:
        model_dir = touch_policy(factory.runner.instruction("create-done"))
    except BaseException:
        factory.close()
        raise
    trainer, before = train_on_episodes(factory, model_dir, tmp_path / "out")

    trials = recorded(factory.runner.job_dir)
    # one episode per rollout: 2 steps x 4 generations, each verified and recorded, sandboxes all released
    assert len(trials) == 8
    assert all(t.failure is None for t in trials), [t.failure for t in trials]
    assert not factory.runner.service.episodes
    # the model's bash calls ran in the sandboxes: the verifier found done.txt in some of them, not all
    rewards = [t.reward for t in trials]
    assert set(rewards) == {0.0, 1.0}, rewards
    # the verifier's rewards are the ones TRL logged, step by step
    logged = [e["rewards/EvsysTrlEnvironment/mean"] for e in trainer.state.log_history if "loss" in e]
    assert logged == pytest.approx([sum(rewards[0:4]) / 4, sum(rewards[4:8]) / 4])
    # and they moved the policy
    assert changed(before, trainer.model)


@pytest.mark.needs_sandbox
def test_an_environment_is_an_episode_whose_reward_the_policy_cannot_write(tmp_path: Path) -> None:
    factory = EnvironmentFactory(TASKS / "create-done", jobs_dir=tmp_path / "jobs")
    try:
        environment = factory()
        instruction = environment.reset(task="create-done", prompt=[{"role": "user", "content": ""}])
        assert instruction.startswith("Create the file done.txt")
        # the tools run in the sandbox as the task's agent user, in its workdir
        user, cwd = environment.bash(command="id -u; pwd").split()
        assert user != "0" and cwd == "/app"
        # the policy tries to grant itself the reward: the command runs, and the write is refused
        forged = environment.bash(
            command="mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; echo rc=$?"
        )
        assert "rc=1" in forged and "Permission denied" in forged
        assert environment.get_reward() == 0.0
        assert environment.result is not None and environment.result.failure is None
        assert environment.bash(command="true") == "The episode is over: no more tool calls run."
        # the same instance serves the next episode, in a fresh sandbox
        environment.reset(task="create-done")
        environment.write_file(path="done.txt", content="")
        assert environment.read_file(path="/app/done.txt") == ""
        assert environment.get_reward() == 1.0
    finally:
        factory.close()
    assert len(list(factory.runner.job_dir.glob("*/result.json"))) == 2
    assert not factory.runner.service.episodes


def test_the_old_name_still_works_with_a_deprecation_warning():
    """Code written against `EvsysEnvironment` (the name docs gave TRL's environment before Harbor's took it
    alone) still gets the environment, warned that it was renamed."""
    import evsys.integrations.trl as trl_integration

    with pytest.warns(DeprecationWarning, match="EvsysTrlEnvironment"):
        old = trl_integration.EvsysEnvironment
    assert old is EvsysTrlEnvironment
    with pytest.raises(AttributeError):
        trl_integration.NoSuchName  # noqa: B018
