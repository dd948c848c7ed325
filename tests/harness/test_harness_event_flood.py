"""A harness that floods its event stream: every event is still streamed live, but the orchestrator keeps a
bounded number of them (and the turn's outcome), and says how many it dropped."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from evsys.agent.harness import HarnessConfig, HarnessEnvironment, ModelEndpoint, StdioHarnessAdapter
from evsys.agent.harness.events import MAX_KEPT_EVENTS, EventLog, HarnessEventType

SYSTEM_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
FLOOD = 25_000
FLOODING_HARNESS = f"""
import json, sys
print(json.dumps({{"type": "ready"}}), flush=True)
for line in sys.stdin:
    for i in range({FLOOD}):
        print(json.dumps({{"type": "text_output", "text": f"flood {{i}} " + "x" * 100}}))
    print(json.dumps({{"type": "turn_complete"}}), flush=True)
"""


async def test_a_flooded_event_stream_is_streamed_live_but_kept_bounded(tmp_path):
    script = tmp_path / "flooding_harness.py"
    script.write_text(FLOODING_HARNESS)
    config = HarnessConfig(
        name="flooding", command=[SYSTEM_PYTHON, "-I", str(script)], working_directory=str(tmp_path),
        startup_timeout_s=20, session_timeout_s=120,
    )  # fmt: skip
    endpoint = ModelEndpoint("http://127.0.0.1:9", "unused")  # this harness never calls a model
    env = HarnessEnvironment(lambda: StdioHarnessAdapter(config, endpoint=endpoint))
    await env.reset()
    try:
        live = [event async for event in env.step_streaming("go")]
    finally:
        await env.close()
    assert len(live) == FLOOD + 1  # the attack ran: every event went out live
    (turn,) = env.turns
    assert len(turn.events) == MAX_KEPT_EVENTS + 1 and turn.ok
    assert turn.events[-1].type == HarnessEventType.TURN_COMPLETE


def test_the_event_log_keeps_turn_ends_and_counts_what_it_dropped():
    from evsys.agent.harness.events import HarnessEvent

    log = EventLog(max_events=3, max_bytes=10_000)
    for i in range(10):
        log.append(HarnessEvent(type=HarnessEventType.TEXT_OUTPUT, data={"text": str(i)}))
    log.append(HarnessEvent(type=HarnessEventType.TURN_COMPLETE, data={"status": "ok"}))
    assert [e.type for e in log] == [HarnessEventType.TEXT_OUTPUT] * 3 + [HarnessEventType.TURN_COMPLETE]
    assert log.dropped == 7 and log.seen == 11
    lines = [json.loads(line) for line in log.jsonl().splitlines()]
    assert lines[-1] == {"type": "events_dropped", "count": 7, "kept": 4}
    event = HarnessEvent(type=HarnessEventType.TEXT_OUTPUT, data={"text": "y" * 200})
    big = EventLog(max_events=100, max_bytes=2 * len(event.model_dump_json()) + 10)
    for _ in range(10):
        big.append(event)
    assert len(big) == 2 and big.dropped == 8
