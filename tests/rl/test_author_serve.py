"""`evsys serve` (its service, in process, over an in-memory sandbox) serves a Python task's own tools and
turns: list_tools shows the custom tool and only the built-in tools the task chose, calling it works with
validated arguments, a built-in tool the task left out is refused, and message actions get the respond
hook's reply in the observation until it says done and the episode is scored."""

from __future__ import annotations

import json

from author_hooks import CALLS, game_dataset

from evsys.engine.episodes import ServeSettings, build_service
from evsys.engine.episodes.protocol import CallToolAction, MessageAction, ResetParams


async def test_serve_lists_and_calls_the_custom_tool_and_answers_messages_with_the_environment(
    tmp_path, memory_backend
):
    CALLS.clear()
    service = build_service(
        game_dataset(tmp_path / "game"),
        ServeSettings(),
        job_name="served",
        jobs_dir=tmp_path / "jobs",
        sandbox=memory_backend(),
    )
    await service.start()
    try:
        session = service.open_session("ws")
        start = await session.reset(ResetParams(task="game"))
        assert start.metadata["tools"] == ["submit", "capital"]
        assert [s["function"]["name"] for s in session.tool_schemas()] == ["submit", "capital"]

        refused, _, done = await session.step(CallToolAction(tool_name="bash", arguments={"command": "id"}))
        assert refused.error is not None and refused.error.error_type == "tool_not_found" and not done
        bad, _, _ = await session.step(CallToolAction(tool_name="capital", arguments={"country": 3}))
        assert bad.error is not None and bad.error.error_type == "invalid_args"
        called, _, _ = await session.step(CallToolAction(tool_name="capital", arguments={"country": "Japan"}))
        assert called.result == {"data": "Tokyo", "is_error": False}
        assert CALLS == [("capital", ("Japan", False))]

        first, reward, done = await session.step(MessageAction(message="4"))
        assert (first.text, reward, done) == ("higher", None, False)
        last, reward, done = await session.step(MessageAction(message="7"))
        assert done and reward == 1.0 and last.metadata["ended_by"] == "environment_done"
        trial = last.metadata["trial_name"]
    finally:
        await service.close()
    saved = json.loads((tmp_path / "jobs" / "served" / trial / "trajectory.json").read_text())
    turns = [(s["source"], s["message"]) for s in saved["steps"] if not s.get("tool_calls")]
    assert turns[-3:] == [("agent", "4"), ("user", "higher"), ("agent", "7")]
