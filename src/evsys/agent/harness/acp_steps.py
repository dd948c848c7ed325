"""An ACP harness's own view of its session as ATIF steps (`agent/native-trajectory.json`), built from the
session updates it sent: per turn, the user's prompt, then agent steps holding the streamed text, the thoughts
(as reasoning) and the tool calls, each call's result as the observation of the step that made it. Text after
a tool result starts a new agent step. Permission decisions are not steps (they stay in the event log)."""

from __future__ import annotations

import json
from typing import Any

from evsys.agent.harness.events import HarnessEvent, HarnessEventType
from evsys.records import Observation, ObservationResult, Step, ToolCall

MAX_KEPT_EVENTS = 10_000  # per adapter: a runaway harness cannot grow the native log without bound


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    return {} if raw is None else {"raw": raw}


def _output_text(output: Any) -> str:
    return output if isinstance(output, str) else json.dumps(output, default=str)


class _Builder:
    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.open: Step | None = None  # the agent step text and calls are added to
        self.owners: dict[str, Step] = {}

    def add(self, source: Any, message: str = "") -> Step:
        step = Step(step_id=len(self.steps) + 1, source=source, message=message)
        self.steps.append(step)
        return step

    def agent(self) -> Step:
        if self.open is None:
            self.open = self.add("agent")
        return self.open

    def event(self, event: HarnessEvent) -> None:
        data = event.data
        if event.type == HarnessEventType.TEXT_OUTPUT:
            step = self.agent()
            step.message += str(data.get("text", ""))
        elif event.type == HarnessEventType.LLM_CHUNK and data.get("reasoning"):
            step = self.agent()
            step.reasoning_content = (step.reasoning_content or "") + str(data["reasoning"])
        elif event.type == HarnessEventType.TOOL_CALL and "permission" not in data:
            step = self.agent()
            call_id = str(data.get("id", ""))
            call = ToolCall(
                tool_call_id=call_id,
                function_name=str(data.get("name") or ""),
                arguments=_arguments(data.get("arguments")),
            )
            step.tool_calls = [*(step.tool_calls or []), call]
            self.owners[call_id] = step
        elif event.type == HarnessEventType.TOOL_RESULT:
            call_id = str(data.get("id", ""))
            owner = self.owners.get(call_id)
            if owner is not None:
                owner.observation = owner.observation or Observation()
                result = ObservationResult(source_call_id=call_id, content=_output_text(data.get("output")))
                owner.observation.results.append(result)
            self.open = None


def events_to_steps(turns: list[tuple[str, list[HarnessEvent]]]) -> list[Step]:
    """ATIF steps from `(prompt, events)` per turn, in order."""
    builder = _Builder()
    for prompt, events in turns:
        builder.open = None
        builder.add("user", prompt)
        for event in events:
            builder.event(event)
    return builder.steps
