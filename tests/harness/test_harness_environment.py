"""HarnessEnvironment: multi-turn episodes (context carried across turns), reset restarts the harness."""

from __future__ import annotations

import pytest
from tiny_harness_config import tiny_config

from evsys.agent.harness import (
    EnvTool,
    HarnessEnvironment,
    HarnessEventType,
    HarnessStateError,
    ModelEndpoint,
    StdioHarnessAdapter,
)
from evsys.testing.tiny_model import DEMO_GREETING, DEMO_GREETING_REPLY

GREET = DEMO_GREETING[0]["content"]


@pytest.fixture
def episode(proxy, tmp_path):
    """An environment making tiny harnesses (no tools for the model), each on a new proxy session."""
    sessions = []

    def factory() -> StdioHarnessAdapter:
        session = proxy.open_session()
        sessions.append(session)
        endpoint = ModelEndpoint.for_session(proxy.url, session)
        return StdioHarnessAdapter(tiny_config(tmp_path, "--no-tools"), endpoint=endpoint)

    return HarnessEnvironment(
        factory, rubric=lambda turn: 1.0 if "Hello" in turn.text else 0.0, max_turns=3
    ), sessions


async def test_second_turn_sees_the_first_turns_context(episode):
    """Turn 2's model call carries turn 1's user message and the assistant's reply; each turn is scored."""
    env, sessions = episode
    async with env:
        await env.reset()
        first = await env.step(GREET)
        second = await env.step("And again, please.")
        assert first.reward == 1.0 and first.text == DEMO_GREETING_REPLY["content"] and not first.done
        assert second.turn == 2 and second.events[-1].type == HarnessEventType.TURN_COMPLETE
        calls = sessions[0].calls
        assert calls[-1].messages[:3] == [
            {"role": "user", "content": GREET},
            {"role": "assistant", "content": first.text},
            {"role": "user", "content": "And again, please."},
        ]
        assert (await env.state())["turns"] == 2


async def test_reset_restarts_the_harness_with_a_fresh_context(episode):
    """After reset the old harness is gone and the new one's first call has no earlier messages."""
    env, sessions = episode
    async with env:
        await env.reset()
        await env.step(GREET)
        old_pid = env.adapter.process.pid
        await env.reset()
        assert env.adapter.process.pid != old_pid and (await env.state())["turns"] == 0
        await env.step(GREET)
        assert sessions[1].calls[0].messages == [{"role": "user", "content": GREET}]
    assert not (await env.state())["alive"]


async def test_max_turns_ends_the_episode_and_step_needs_reset(episode):
    """The episode is done after max_turns; another step is refused until reset."""
    env, _ = episode
    env.max_turns = 1
    async with env:
        with pytest.raises(HarnessStateError, match="call reset"):
            await env.step(GREET)
        await env.reset()
        assert (await env.step(GREET)).done
        with pytest.raises(HarnessStateError, match="episode is done"):
            await env.step(GREET)


async def test_failed_turn_ends_the_episode_without_reward(proxy, tmp_path):
    """A harness that hangs past its timeout yields done=True, no reward and the error."""

    def factory() -> StdioHarnessAdapter:
        return StdioHarnessAdapter(tiny_config(tmp_path, "--mode", "hang", session_timeout_s=1))

    env = HarnessEnvironment(factory, rubric=lambda turn: 1.0, tools=[EnvTool(name="lookup")])
    async with env:
        reset = await env.reset()
        assert reset.metadata["tools"] == ["lookup"]
        observation = await env.step("anything")
    assert observation.done and observation.reward is None and "session timeout" in observation.error
