"""A harness that floods its event stream: every event is still streamed live, but the orchestrator keeps a
bounded number of them (and the turn's outcome), and says how many it dropped."""

from __future__ import annotations

import json

import pytest
from harness_episodes import harness_session, reset, say
from tiny_harness import FLOOD

from evsys.agent.harness.events import MAX_KEPT_EVENTS, EventLog, HarnessEventType


@pytest.mark.needs_sandbox
async def test_a_flooded_event_stream_is_streamed_live_but_kept_bounded(tmp_path, tiny_agent):
    """A harness printing 25,000 events in one turn: every event reaches the client live, but the episode
    keeps (and writes to agent/harness-events.jsonl) a bounded log that still ends with the turn's end."""
    name = tiny_agent("flooding", "--mode", "flood")
    live: list = []
    async with harness_session(tmp_path, name, client=None) as session:  # this harness never calls a model
        started = await reset(session)
        observation, _, _ = await say(session, "go", live)
        session.close("the test is over")
    assert len(live) == FLOOD + 1  # the attack ran: every event went out live
    assert observation.events is None and observation.metadata["turn_status"] == "ok"
    trial_dir = tmp_path / "harness" / started.metadata["trial_name"]
    lines = [
        json.loads(line) for line in (trial_dir / "agent" / "harness-events.jsonl").read_text().splitlines()
    ]
    assert len(lines) == MAX_KEPT_EVENTS + 2  # the kept events, then the count of those dropped
    assert lines[-2]["type"] == HarnessEventType.TURN_COMPLETE
    assert lines[-1] == {
        "type": "events_dropped",
        "count": FLOOD - MAX_KEPT_EVENTS,
        "kept": MAX_KEPT_EVENTS + 1,
    }


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
