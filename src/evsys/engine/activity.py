"""What a running trial is doing now, from its live events: the phase it entered (sandbox start, image,
agent, verifier) and, while its agent works, the loop agent's turn or a harness's model call. `Job.status()`
keeps one `TrialActivity` per running trial for `evsys run`'s progress display."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

PHASE_LABELS = {
    "environment_build": "image",
    "sandbox_start": "sandbox start",
    "agent_setup": "agent setup",
    "agent_run": "agent",
    "verifier": "verifier",
    "logs_download": "copying logs",
    "sandbox_stop": "sandbox stop",
}
AFTER_AGENT = {"verifier", "logs_download", "sandbox_stop"}  # the agent's turns are over


def _turn(data: dict[str, Any]) -> str:
    return f"agent turn {data.get('turn', '?')}"


def _model_call(data: dict[str, Any]) -> str:
    index = data.get("call_index")
    return f"agent model call {index + 1 if isinstance(index, int) else '?'}"


AGENT_DETAIL = {"turn": _turn, "llm_request": _model_call}  # the loop agent's turns, a harness's calls


class TrialActivity(BaseModel):
    """One running trial's latest phase and, until the agent is done, its agent's latest turn or call (the
    loop agent's first call starts early, while the sandbox starts, so both may be under way at once)."""

    phase: str | None = None
    agent: str | None = None

    def update(self, event: dict[str, Any]) -> bool:
        """Take in one event of the trial; False when it says nothing of what the trial does."""
        data = event.get("data")
        data = data if isinstance(data, dict) else {}
        kind = str(event.get("type"))
        if kind == "phase":
            self.phase = str(data.get("phase", "?"))
            if self.phase in AFTER_AGENT:
                self.agent = None
            return True
        describe = AGENT_DETAIL.get(kind)
        if describe is None:
            return False
        self.agent = describe(data)
        return True

    def text(self) -> str:
        """`agent turn 2`, `sandbox start (agent turn 1)`, `verifier`."""
        phase = PHASE_LABELS.get(self.phase, self.phase) if self.phase else None
        if self.agent is None:
            return phase or "starting"
        if phase is None or self.phase == "agent_run":
            return self.agent
        return f"{phase} ({self.agent})"


def event_text(event: dict[str, Any]) -> str | None:
    """One event as `TrialActivity` reads it (`sandbox start`, `agent turn 2`); None for other events."""
    activity = TrialActivity()
    return activity.text() if activity.update(event) else None
