"""OpenEnv 0.10's MCP harness adapter over an `EvsysSessionFactory` session of a Python task that chooses its
tools, adds a custom one and answers the model's turns with a respond hook: the session lists the task's
tools and `reply`, runs the custom tool with evsys's argument validation, and `reply` brings the hook's
answers back until it says done and the verifier scores the game."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from openenv.core.harness import HarnessRunLimits, MCPHarnessAdapter, ModelStepResult
from openenv.core.llm_client import LLMResponse, ToolCall

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "rl"))  # author_hooks: the tools and the hook

from author_hooks import CALLS, game_dataset

from evsys.integrations.openenv import EvsysSessionFactory

CALLS_MADE = [
    ("capital", {"country": 3}),
    ("capital", {"country": "Japan"}),
    ("reply", {"message": "4"}),
    ("reply", {"message": "7"}),
]


def scripted(seen: list[list[dict[str, Any]]]) -> Any:
    """An OpenEnv `ModelStep` making CALLS_MADE's calls, one a turn."""

    def step(messages: list[dict[str, Any]], tools: list[Any], sampling: dict[str, Any]) -> ModelStepResult:
        seen.append(list(messages))
        name, args = CALLS_MADE[len(seen) - 1]
        call = ToolCall(id=f"c{len(seen)}", name=name, args=args)
        return ModelStepResult(response=LLMResponse(content="", tool_calls=[call]))

    return step


def test_a_session_offers_the_tasks_tools_and_its_environments_turns(tmp_path: Path, memory_backend) -> None:
    CALLS.clear()
    factory = EvsysSessionFactory(
        game_dataset(tmp_path / "game"), jobs_dir=tmp_path / "jobs", sandbox=memory_backend()
    )
    try:
        session = factory.create("game")
        assert [t.name for t in session.list_tools()] == ["submit", "capital", "reply"]
        with pytest.raises(KeyError):  # a built-in tool the task left out
            session.call_tool("bash", {"command": "id"})
        seen: list[list[dict[str, Any]]] = []
        rollout = MCPHarnessAdapter().run_white_box(scripted(seen), session, HarnessRunLimits(max_turns=6))
        verify = session.verify(rollout.messages)
        session.close()
    finally:
        factory.close()
    results = [entry.result for entry in rollout.tool_trace]
    # the wrong argument never reached the function; the right one did
    assert results[0].error is not None and "country" in results[0].error
    assert results[1].data == "Tokyo" and CALLS == [("capital", ("Japan", False))]
    # the hook's answers came back as the tool messages, until it was done and the verifier scored the game
    assert results[2].data == "higher" and not results[2].done
    assert results[3].done and results[3].metadata["reward"] == 1.0
    assert rollout.done and len(seen) == 4 and verify.env_reward == 1.0
