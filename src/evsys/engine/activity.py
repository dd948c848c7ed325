"""What a running trial is doing now, from its live events: the phase it entered (sandbox start, image,
agent, verifier), the loop agent's turn, a harness's model call. `Job.status()` keeps the latest per running
trial for `evsys run`'s progress display."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PHASE_LABELS = {
    "environment_build": "image",
    "sandbox_start": "sandbox start",
    "agent_setup": "agent setup",
    "agent_run": "agent",
    "verifier": "verifier",
    "logs_download": "copying logs",
    "sandbox_stop": "sandbox stop",
}


def _phase(data: dict[str, Any]) -> str:
    phase = str(data.get("phase", "?"))
    return PHASE_LABELS.get(phase, phase)


def _turn(data: dict[str, Any]) -> str:
    return f"agent turn {data.get('turn', '?')}"


def _model_call(data: dict[str, Any]) -> str:
    index = data.get("call_index")
    return f"agent model call {index + 1 if isinstance(index, int) else '?'}"


DESCRIBE: dict[str, Callable[[dict[str, Any]], str]] = {
    "phase": _phase,
    "turn": _turn,
    "llm_request": _model_call,  # a harness's call through the model proxy
}


def activity(event: dict[str, Any]) -> str | None:
    """The event as what its trial is doing now (`agent turn 3`, `verifier`); None for other events."""
    describe = DESCRIBE.get(str(event.get("type")))
    if describe is None:
        return None
    data = event.get("data")
    return describe(data if isinstance(data, dict) else {})


AGENT_DETAIL = ("agent turn ", "agent model call ")  # finer than the agent phase itself


def next_activity(previous: str | None, event: dict[str, Any]) -> str | None:
    """What the trial does after `event`, given what it did (`previous`); None when the event says nothing
    of it. Entering the agent phase keeps a turn already under way: the loop agent's first call starts early,
    while the sandbox starts, and is still running then."""
    now = activity(event)
    if now == PHASE_LABELS["agent_run"] and previous is not None and previous.startswith(AGENT_DETAIL):
        return previous
    return now
