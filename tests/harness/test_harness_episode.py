"""Harness episodes (evsys.engine.episodes, what `evsys serve --harness` serves): one step is one turn of a
real harness process in the episode's sandbox, the harness keeps its context across turns, a reset starts a
new episode with a fresh harness, and the step limit or a failed turn ends the episode."""

from __future__ import annotations

import json

import pytest
from harness_episodes import harness_session, requests_messages, reset, say, submit

from evsys.engine.episodes import ErrorCode, ServeError
from evsys.testing.tiny_model import DEMO_GREETING, DEMO_GREETING_REPLY

pytestmark = pytest.mark.needs_sandbox
GREET = DEMO_GREETING[0]["content"]


async def test_second_turn_sees_the_first_turns_context(tmp_path, tiny_engine_client, tiny_agent):
    """Turn 2's model request carries turn 1's message, the reply and turn 2's message; the episode ends
    at submit, scored by the task's verifier, with the proxy's token-exact calls as its trajectory."""
    name = tiny_agent("tiny-harness", "--no-tools")
    async with harness_session(tmp_path, name, tiny_engine_client) as session:
        started = await reset(session)
        first, _, first_done = await say(session, GREET)
        second, _, _ = await say(session, "And again, please.")
        assert session.state().step_count == 2
        final, reward, done = await submit(session)
    assert started.metadata["harness"] == name and started.metadata["tools"] == ["submit"]
    assert first.text == DEMO_GREETING_REPLY["content"] and not first_done
    assert requests_messages(first.events) == [1] and requests_messages(second.events) == [3]
    assert second.events[-1]["type"] == "turn_complete" and second.metadata["turn_status"] == "ok"
    assert done and reward == 0.0  # greeting.txt was never written
    trial_dir = tmp_path / "harness" / final.metadata["trial_name"]
    steps = json.loads((trial_dir / "trajectory.json").read_text())["steps"]
    assert len([s for s in steps if s["source"] == "agent"]) == 2


async def test_reset_starts_a_fresh_harness(tmp_path, tiny_engine_client, tiny_agent):
    """After a reset the new episode is another trial whose harness starts with no earlier messages; the
    episode the client left is still verified and recorded."""
    name = tiny_agent("tiny-harness", "--no-tools")
    async with harness_session(tmp_path, name, tiny_engine_client) as session:
        first = await reset(session)
        await say(session, GREET)
        second = await reset(session)
        observation, _, _ = await say(session, GREET)
        assert session.state().step_count == 1
    assert second.metadata["trial_name"] != first.metadata["trial_name"]
    assert requests_messages(observation.events) == [1]
    left = json.loads((tmp_path / "harness" / first.metadata["trial_name"] / "result.json").read_text())
    assert "reset" in left["failure"]["message"]


async def test_the_step_limit_ends_the_episode_and_a_step_needs_reset(
    tmp_path, tiny_engine_client, tiny_agent
):
    """With one step allowed the first turn ends the episode; a step before reset or after the end is
    refused with NO_EPISODE."""
    name = tiny_agent("tiny-harness", "--no-tools")
    async with harness_session(tmp_path, name, tiny_engine_client, max_steps=1) as session:
        with pytest.raises(ServeError, match="send reset first") as early:
            await say(session, GREET)
        await reset(session)
        observation, _, done = await say(session, GREET)
        with pytest.raises(ServeError, match="episode is over") as late:
            await say(session, GREET)
    assert early.value.code == late.value.code == ErrorCode.NO_EPISODE
    assert done and observation.metadata["ended_by"] == "max_steps"


async def test_a_failed_turn_ends_the_episode(tmp_path, tiny_engine_client, tiny_agent):
    """A harness that hangs past its session timeout: the turn fails, the episode is done and its
    failure names the timeout."""
    name = tiny_agent("tiny-hang", "--mode", "hang", session_timeout_s=1)
    async with harness_session(tmp_path, name, tiny_engine_client) as session:
        await reset(session)
        observation, _, done = await say(session, "anything")
    assert done and observation.metadata["turn_status"] == "error"
    assert "session timeout" in observation.metadata["failure"]["message"]
