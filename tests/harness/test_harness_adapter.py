"""HarnessAdapter contract: a real tiny harness process talking to the recording proxy (OpenAI API)."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from evsys.agent.harness import HarnessEventType, HarnessStartError, HarnessStateError
from evsys.testing.tiny_model import DEMO_GREETING, DEMO_GREETING_REPLY, DEMO_LIST_FILES

E = HarnessEventType


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_turn_streams_model_and_tool_events_and_records_calls(make_adapter, tmp_path):
    """One turn: the harness calls the model through the proxy, runs `ls`, and ends with TURN_COMPLETE."""
    (tmp_path / "marker.txt").write_text("x")
    adapter, session = make_adapter()
    await adapter.start()
    assert await adapter.is_alive()
    events = [e async for e in adapter.send_message_streaming(DEMO_LIST_FILES[0]["content"])]
    kinds = [e.type for e in events]
    assert kinds[-1] == E.TURN_COMPLETE and events[-1].data["status"] == "ok"
    assert kinds.index(E.LLM_REQUEST) < kinds.index(E.LLM_RESPONSE) < kinds.index(E.TOOL_CALL)
    assert kinds.index(E.TOOL_CALL) < kinds.index(E.TOOL_RESULT)
    call = next(e for e in events if e.type == E.TOOL_CALL)
    assert call.data["name"] == "bash" and json.loads(call.data["arguments"]) == {"command": "ls"}
    assert "marker.txt" in next(e for e in events if e.type == E.TOOL_RESULT).data["output"]
    assert len(session.calls) == kinds.count(E.LLM_RESPONSE) >= 1
    assert all(c.completion.completion_token_ids and c.completion.logprobs for c in session.calls)
    assert {e.turn for e in events} == {1}
    steps = session.to_steps()
    assert [s.source for s in steps][:2] == ["user", "agent"]
    assert "marker.txt" in steps[1].observation.results[0].content
    assert steps[1].metrics.completion_token_ids == session.calls[0].completion.completion_token_ids
    pid = adapter.process.pid
    await adapter.stop()
    assert not await adapter.is_alive() and process_gone(pid)


async def test_streaming_harness_emits_chunks_and_text(make_adapter):
    """With --stream the harness reads SSE from the proxy; its chunks and final text are the model's reply."""
    adapter, session = make_adapter("--stream", "--no-tools")
    await adapter.start()
    turn = await adapter.send_message(DEMO_GREETING[0]["content"])
    assert turn.ok and turn.error is None
    assert turn.text == DEMO_GREETING_REPLY["content"]
    assert "".join(e.data["text"] for e in turn.of_type(E.LLM_CHUNK)) == DEMO_GREETING_REPLY["content"]
    assert session.calls[0].stream


async def test_harness_environment_is_minimal_and_points_at_the_proxy(make_adapter, monkeypatch):
    """The harness sees its endpoint variables and config env, never the host's environment (secrets)."""
    monkeypatch.setenv("EVSYS_TEST_HOST_SECRET", "do-not-leak")
    adapter, session = make_adapter(env_vars={"HARNESS_FLAG": "1"})
    await adapter.start()
    seen = set(adapter.ready_info["env"])
    assert {"OPENAI_API_KEY", "OPENAI_BASE_URL", "EVSYS_MODEL", "HARNESS_FLAG", "PATH"} <= seen
    assert "EVSYS_TEST_HOST_SECRET" not in seen and "HOME" not in seen
    assert adapter.environment()["OPENAI_API_KEY"] == session.key


async def test_crash_at_start_is_a_clear_error(make_adapter):
    """A harness that exits before it is ready fails start() with its exit code and stderr."""
    adapter, _ = make_adapter("--mode", "crash")
    with pytest.raises(HarnessStartError) as info:
        await adapter.start()
    message = str(info.value)
    assert "'tiny-harness' exited with code 3 before it was ready" in message
    assert "cannot find its configuration" in message
    assert not await adapter.is_alive()


async def test_silent_harness_hits_the_startup_timeout(make_adapter):
    """A harness that never says ready is killed after startup_timeout_s."""
    adapter, _ = make_adapter("--mode", "silent", startup_timeout_s=1)
    with pytest.raises(HarnessStartError, match="did not become ready within 1 s"):
        await adapter.start()
    assert not await adapter.is_alive() and process_gone(adapter.process.pid)


async def test_hang_past_session_timeout_is_killed_and_reported(make_adapter):
    """A turn past session_timeout_s ends with ERROR(timeout) + TURN_COMPLETE(error); harness killed."""
    adapter, _ = make_adapter("--mode", "hang", session_timeout_s=1)
    await adapter.start()
    turn = await adapter.send_message("anything")
    assert not turn.ok and "session timeout of 1 s" in turn.error
    assert [e.type for e in turn.events] == [E.ERROR, E.TURN_COMPLETE]
    assert turn.events[0].data["kind"] == "timeout"
    assert not await adapter.is_alive() and process_gone(adapter.process.pid)
    with pytest.raises(HarnessStateError, match="not running"):
        await adapter.send_message("again")


async def test_garbage_on_stdout_is_a_protocol_error(make_adapter):
    """A non-JSON line ends the turn with a protocol error quoting the line; the harness is killed."""
    adapter, _ = make_adapter("--mode", "garbage")
    await adapter.start()
    turn = await adapter.send_message("anything")
    assert not turn.ok and turn.events[-2].data["kind"] == "protocol"
    assert "broke its protocol" in turn.error and "Traceback (most recent call last)" in turn.error
    assert not await adapter.is_alive()


async def test_death_mid_turn_reports_the_exit_code(make_adapter):
    """A harness that exits during a turn ends it with a crash error naming the exit code."""
    adapter, session = make_adapter("--mode", "die", "--no-tools")
    await adapter.start()
    turn = await adapter.send_message(DEMO_GREETING[0]["content"])
    assert not turn.ok and "exited with code 5 during the turn" in turn.error
    assert turn.events[-2].data["kind"] == "crash"
    assert len(session.calls) == 1  # the call it made before dying is still recorded


async def test_adapter_misuse_is_refused(make_adapter):
    """Two starts, or a turn before start, are state errors naming the harness."""
    adapter, _ = make_adapter()
    with pytest.raises(HarnessStateError, match="'tiny-harness' is not running"):
        await adapter.send_message("hi")
    await adapter.start()
    with pytest.raises(HarnessStateError, match="already started"):
        await adapter.start()


async def test_cancelled_turn_kills_the_harness(make_adapter):
    """Cancelling a turn from outside (an agent timeout) kills the harness process group."""
    adapter, _ = make_adapter("--mode", "hang")
    await adapter.start()
    pid = adapter.process.pid

    async def consume() -> None:
        async for _ in adapter.send_message_streaming("anything"):
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not await adapter.is_alive() and process_gone(pid)
