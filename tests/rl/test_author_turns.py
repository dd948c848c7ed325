"""A Python task's `respond` hook: the environment answers each model turn (here a guessing game's user
simulator) until it says done; its replies are user turns of the trajectory whose tokens are context (loss
mask 0) in the flattened rollout, and a failing hook fails the trial naming it. Scripted model, no sandbox."""

from __future__ import annotations

from author_hooks import ASSISTANT, CALLS, END, USER, game_task, peek, render, token_reply

from evsys import run_rollouts
from evsys.records import FailureCause
from evsys.testing.scripted_model import ScriptedModelClient, tool_call


def _chars(text: str) -> list[int]:
    return [10 + ord(ch) for ch in text]


async def test_the_environment_answers_each_turn_until_done_and_its_tokens_are_not_trained(tmp_path):
    client = ScriptedModelClient(token_reply("5"), token_reply("8"), token_reply("7"))
    groups = await run_rollouts([game_task(max_turns=6)], model=client, jobs_dir=tmp_path, max_retries=0)
    sample = groups[0].trajectories[0]
    assert sample.error is None and sample.reward == 1.0
    steps = [(s.source, s.message) for s in sample.trajectory.steps]
    assert steps == [
        ("user", "Guess my number between 1 and 10."),
        ("agent", "5"),
        ("user", "higher"),
        ("agent", "8"),
        ("user", "lower"),
        ("agent", "7"),
    ]
    assert client.requests[2].messages[-1] == {"role": "user", "content": "lower"}
    assert all(not request.tools for request in client.requests)  # no sandbox, no tools: a plain chat
    # one token sequence: the first prompt, then each completion (mask 1) and the environment's reply (mask 0)
    assert sample.prompt_token_ids == render(
        [{"role": "user", "content": "Guess my number between 1 and 10."}]
    )
    reply = [USER, *_chars("higher"), END, ASSISTANT]
    expected = [*_chars("5"), END, *reply, *_chars("8"), END]
    assert sample.completion_token_ids[: len(expected)] == expected
    masks = sample.loss_mask[: len(expected)]
    assert masks == [1, 1, *([0] * len(reply)), 1, 1]
    assert not sample.prefix_break


async def test_the_task_turn_limit_bounds_the_game_and_no_reply_follows_the_last_turn(tmp_path):
    client = ScriptedModelClient("1", "2", "3")
    groups = await run_rollouts([game_task(max_turns=2)], model=client, jobs_dir=tmp_path, max_retries=0)
    sample = groups[0].trajectories[0]
    assert [s.message for s in sample.trajectory.steps if s.source == "user"] == [
        "Guess my number between 1 and 10.",
        "higher",
    ]
    assert len(client.requests) == 2 and sample.reward == 0.0


async def test_a_failing_respond_hook_fails_the_trial_naming_it(tmp_path):
    task = game_task(max_turns=3).model_copy(update={"respond": "author_hooks:broken_simulator"})
    groups = await run_rollouts([task], model=ScriptedModelClient("5"), jobs_dir=tmp_path, max_retries=0)
    error = groups[0].trajectories[0].error
    assert error is not None and error.cause == FailureCause.AGENT_ERROR
    assert "respond hook 'author_hooks:broken_simulator' failed: RuntimeError: the simulator crashed" in (
        error.message
    )


async def test_a_custom_tool_taking_state_shares_the_episode_state_with_the_respond_hook(tmp_path):
    CALLS.clear()
    client = ScriptedModelClient("5", tool_call("peek"), tool_call("peek", state={"secret": 1}), "7")
    task = game_task(tools=[peek], max_turns=6)
    groups = await run_rollouts([task], model=client, jobs_dir=tmp_path, max_retries=0)
    sample = groups[0].trajectories[0]
    assert sample.error is None and sample.reward == 1.0
    assert [s["function"]["name"] for s in client.requests[0].tools] == ["peek"]
    assert client.requests[0].tools[0]["function"]["parameters"]["properties"] == {}
    # the hook counted one guess before the tool read the state: one dict, shared
    assert CALLS == [("peek", {"secret": 7, "guesses": 1})]
    results = [s.observation.results[0].content for s in sample.trajectory.steps if s.observation]
    assert results == ["odd", "error: peek: state: Extra inputs are not permitted"]
