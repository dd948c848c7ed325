"""PerTurnHarnessAdapter: one real process per turn (tests/harness/per_turn_harness.py) against the proxy."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from evsys.agent.harness import HarnessConfig, HarnessEventType, HarnessStateError, ModelEndpoint
from evsys.agent.harness.events import HarnessEvent
from evsys.agent.harness.per_turn import PerTurnHarnessAdapter

E = HarnessEventType
SCRIPT = Path(__file__).with_name("per_turn_harness.py")
SYSTEM_PYTHON = "/usr/bin/python3"


class ScriptAdapter(PerTurnHarnessAdapter):
    """Runs per_turn_harness.py once per turn; after each turn reports the conversation it saved."""

    def __init__(self, config: HarnessConfig, *, workdir: Path, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.state = workdir / "state.json"
        self.pids = workdir / "pids.txt"
        self.prepared = False

    async def prepare(self) -> None:
        await self.launcher.write_file(str(self.pids), b"")
        self.prepared = True

    def turn_argv(self, message: str, turn: int) -> list[str]:
        return [*self.config.command, "--state", str(self.state), "--pids", str(self.pids)]

    def turn_stdin(self, message: str, turn: int) -> bytes | None:
        return message.encode()

    async def after_turn(self, turn: int, exit_code: int) -> list[HarnessEvent]:
        history = json.loads(self.state.read_text()) if self.state.exists() else []
        return [HarnessEvent(type=E.TEXT_OUTPUT, data={"native_messages": len(history)}, turn=turn)]

    def recorded_pids(self) -> list[int]:
        return [int(line) for line in self.pids.read_text().split()]


def alive(pid: int) -> bool:
    """Whether `pid` is a live (not zombie) process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


async def all_gone(pids: list[int]) -> bool:
    """Whether every process in `pids` has ended (a SIGKILLed process takes a moment to finish exiting)."""
    for _ in range(100):
        if not any(alive(p) for p in pids):
            return True
        await asyncio.sleep(0.1)
    return False


@pytest.fixture
async def make_script_adapter(proxy, tmp_path):
    """Build a ScriptAdapter with its own proxy session; every adapter built is stopped afterwards."""
    built: list[ScriptAdapter] = []

    def make(**overrides: object) -> tuple[ScriptAdapter, Any]:
        session = proxy.open_session()
        fields: dict = {
            "name": "per-turn-test",
            "command": [SYSTEM_PYTHON, "-I", str(SCRIPT)],
            "working_directory": str(tmp_path),
            "session_timeout_s": 60,
        }
        config = HarnessConfig(**(fields | overrides))
        adapter = ScriptAdapter(
            config, workdir=tmp_path, endpoint=ModelEndpoint.for_session(proxy.url, session)
        )
        built.append(adapter)
        return adapter, session

    yield make
    for adapter in built:
        await adapter.stop()


async def test_two_turns_continue_one_conversation(make_script_adapter):
    """Each turn is a fresh process that calls the model through the proxy; turn 2 sees turn 1's history."""
    adapter, session = make_script_adapter()
    await adapter.start()
    assert adapter.prepared and await adapter.is_alive()
    first = [e async for e in adapter.send_message_streaming("hello there")]
    kinds = [e.type for e in first]
    assert kinds[-1] == E.TURN_COMPLETE and first[-1].data == {"status": "ok", "exit_code": 0}
    assert kinds.index(E.LLM_REQUEST) < kinds.index(E.LLM_RESPONSE) < kinds.index(E.TEXT_OUTPUT)
    assert kinds.count(E.TURN_COMPLETE) == 1  # the harness's own turn_complete line is dropped
    assert {e.turn for e in first} == {1}
    second = await adapter.send_message("and again")
    assert second.ok and second.turn == 2
    assert second.of_type(E.TEXT_OUTPUT)[-1].data == {"native_messages": 4}
    assert len(session.calls) == 2
    assert [m["role"] for m in session.calls[1].messages] == ["user", "assistant", "user"]
    assert all(c.completion.completion_token_ids and c.completion.prompt_token_ids for c in session.calls)
    pids = adapter.recorded_pids()
    assert len(pids) == 2 and await all_gone(pids)


async def test_crash_is_an_error_turn_and_the_next_turn_still_runs(make_script_adapter):
    """A non-zero exit ends the turn with ERROR + TURN_COMPLETE(error) naming the code and stderr."""
    adapter, session = make_script_adapter()
    await adapter.start()
    turn = await adapter.send_message("!crash now")
    assert not turn.ok
    assert turn.events[-1].data["kind"] == "crash"
    assert "'per-turn-test'" in turn.error and "exited with code 4" in turn.error
    assert "crashed on purpose" in turn.error
    assert turn.text.startswith("about to crash")  # what it printed before crashing is kept
    assert turn.of_type(E.TEXT_OUTPUT)[-1].data == {"native_messages": 0}  # after_turn ran
    again = await adapter.send_message("hello")
    assert again.ok and again.turn == 2 and len(session.calls) == 1


async def test_hang_past_session_timeout_kills_the_process_tree(make_script_adapter):
    """A turn running past session_timeout_s fails with kind 'timeout'; the harness and its child die."""
    adapter, _ = make_script_adapter(session_timeout_s=3)
    await adapter.start()
    turn = await adapter.send_message("!hang")
    assert not turn.ok and turn.events[-1].data["kind"] == "timeout"
    assert "ran past the session timeout of 3 s" in turn.error
    assert turn.text == "child started"
    pids = adapter.recorded_pids()
    assert len(pids) == 2 and await all_gone(pids)


async def test_garbage_output_is_a_protocol_error(make_script_adapter):
    """A stdout line that is not a JSON event ends the turn (kind 'protocol'), quoting the line."""
    adapter, _ = make_script_adapter()
    await adapter.start()
    turn = await adapter.send_message("!garbage")
    assert not turn.ok and turn.events[-1].data["kind"] == "protocol"
    assert "broke its protocol" in turn.error and "Segmentation fault" in turn.error
    assert await all_gone(adapter.recorded_pids())


async def test_child_holding_stdout_after_exit_is_killed(make_script_adapter):
    """A harness that exits 0 but leaves a child holding its stdout: the turn completes, the child dies."""
    adapter, _ = make_script_adapter()
    await adapter.start()
    turn = await adapter.send_message("!background")
    assert turn.ok and turn.text == "child started\n"
    pids = adapter.recorded_pids()
    assert len(pids) == 2 and await all_gone(pids)


async def test_stop_kills_a_running_turn_and_refuses_more(make_script_adapter):
    """stop() during a turn kills its process tree; the turn ends in error; later turns are refused."""
    adapter, _ = make_script_adapter()
    await adapter.start()
    events: list[HarnessEvent] = []
    started = asyncio.Event()

    async def run() -> None:
        async for event in adapter.send_message_streaming("!hang"):
            events.append(event)
            if event.type == E.TEXT_OUTPUT:
                started.set()

    task = asyncio.create_task(run())
    await asyncio.wait_for(started.wait(), 30)
    await adapter.stop()
    await asyncio.wait_for(task, 30)
    assert events[-1].type == E.TURN_COMPLETE and events[-1].data["status"] == "error"
    assert "stop() was called during the turn" in events[-1].data["error"]
    assert await all_gone(adapter.recorded_pids())
    assert not await adapter.is_alive()
    with pytest.raises(HarnessStateError, match="'per-turn-test' is stopped"):
        await adapter.send_message("hello")


async def test_out_of_order_use_and_launch_failure(make_script_adapter, tmp_path):
    """Turns before start() and a second start() are refused; a missing program is a clear error turn."""
    adapter, _ = make_script_adapter()
    with pytest.raises(HarnessStateError, match="not started"):
        await adapter.send_message("hello")
    await adapter.start()
    with pytest.raises(HarnessStateError, match="already started"):
        await adapter.start()
    missing, _ = make_script_adapter(command=[str(tmp_path / "no-such-harness")])
    await missing.start()
    turn = await missing.send_message("hello")
    assert not turn.ok and "'per-turn-test': could not be launched" in turn.error
    assert "no-such-harness" in turn.error


async def test_a_failing_hook_ends_the_turn_with_a_clear_error(make_script_adapter):
    """A subclass hook that raises (here parse_line) ends the turn at once with the exception named."""
    adapter, _ = make_script_adapter()

    def broken_parse_line(line: bytes, turn: int) -> list[HarnessEvent]:
        raise KeyError("missing field")

    adapter.parse_line = broken_parse_line  # type: ignore[method-assign]
    await adapter.start()
    turn = await adapter.send_message("!hang")
    assert not turn.ok and turn.events[-1].data["kind"] == "crash"
    assert "the adapter failed during the turn: KeyError: 'missing field'" in turn.error
    assert await all_gone(adapter.recorded_pids())
