"""`HarnessEnvironment`: a multi-turn episode around a harness, with the OpenEnv-style reset/step/state
surface.

One `step(message)` is one conversational turn (the harness may make many model and tool calls in it); the
harness keeps its own context between steps. `reset()` stops the current harness and starts a fresh one (a
new adapter from the factory, with the environment's tools injected before it starts). An optional rubric
scores each finished turn; it runs after the turn, outside the harness's reach."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pydantic import BaseModel, Field

from evsys.agent.harness.adapter import HarnessAdapter, HarnessError, HarnessStateError
from evsys.agent.harness.config import EnvTool
from evsys.agent.harness.events import EventLog, HarnessEvent, HarnessEventType, HarnessTurn

TurnRubric = Callable[[HarnessTurn], float | Awaitable[float]]


class HarnessObservation(BaseModel):
    """What a reset or a step returns."""

    done: bool = False
    reward: float | None = None
    text: str = ""
    turn: int = 0
    error: str | None = None
    events: list[HarnessEvent] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


class HarnessEnvironment:
    """Episodes of conversational turns with one harness at a time."""

    def __init__(
        self,
        adapter_factory: Callable[[], HarnessAdapter],
        *,
        tools: list[EnvTool] | None = None,
        rubric: TurnRubric | None = None,
        max_turns: int | None = None,
    ) -> None:
        self.adapter_factory = adapter_factory
        self.tools = list(tools or [])
        self.rubric = rubric
        self.max_turns = max_turns
        self.adapter: HarnessAdapter | None = None
        self.episode_id: str | None = None
        self.turns: list[HarnessTurn] = []
        self.done = False

    async def reset(self, episode_id: str | None = None) -> HarnessObservation:
        """Stop the current harness (if any), start a fresh one, and begin a new episode."""
        await self.close()
        adapter = self.adapter_factory()
        if self.tools:
            adapter.inject_tools(self.tools)
        self.episode_id = episode_id or uuid.uuid4().hex
        self.turns, self.done = [], False
        await adapter.start()
        self.adapter = adapter
        exposed = [t.exposed_name for t in adapter.injected_tools]
        return HarnessObservation(metadata={"episode_id": self.episode_id, "tools": exposed})

    async def step(self, message: str) -> HarnessObservation:
        """Run one turn and return its observation (reward from the rubric, if any)."""
        async for _ in self.step_streaming(message):
            pass
        turn = self.turns[-1]
        return HarnessObservation(
            done=self.done,
            reward=await self._score(turn) if turn.ok else None,
            text=turn.text,
            turn=turn.turn,
            error=turn.error,
            events=turn.events,
            metadata={"episode_id": self.episode_id, "duration_s": turn.duration_s},
        )

    async def step_streaming(self, message: str) -> AsyncIterator[HarnessEvent]:
        """Run one turn, yielding its events live; the turn is recorded when TURN_COMPLETE arrives."""
        adapter = self._require_running()
        events = EventLog()
        async for event in adapter.send_message_streaming(message):
            events.append(event)
            if event.type == HarnessEventType.TURN_COMPLETE:
                self._record(events)
            yield event

    def _record(self, events: EventLog) -> None:
        last = events.events[-1]
        ok = last.data.get("status") == "ok"
        started = events.events[0].timestamp
        turn = HarnessTurn(
            turn=last.turn,
            events=list(events),
            ok=ok,
            error=None if ok else str(last.data.get("error")),
            duration_s=max(0.0, last.timestamp - started),
        )
        self.turns.append(turn)
        self.done = not ok or (self.max_turns is not None and len(self.turns) >= self.max_turns)

    def _require_running(self) -> HarnessAdapter:
        if self.adapter is None:
            raise HarnessStateError("call reset() before step(): no harness is running")
        if self.done:
            raise HarnessStateError("the episode is done; call reset() to start a new one")
        return self.adapter

    async def _score(self, turn: HarnessTurn) -> float | None:
        if self.rubric is None:
            return None
        value = self.rubric(turn)
        if inspect.isawaitable(value):
            value = await value
        return float(value)

    async def state(self) -> dict[str, Any]:
        """Episode id, turns so far, whether the episode is done and whether the harness is alive."""
        alive = self.adapter is not None and await self.adapter.is_alive()
        return {"episode_id": self.episode_id, "turns": len(self.turns), "done": self.done, "alive": alive}

    async def close(self) -> None:
        """Stop the harness (idempotent)."""
        adapter, self.adapter = self.adapter, None
        if adapter is not None:
            try:
                await adapter.stop()
            except HarnessError:
                pass

    async def __aenter__(self) -> HarnessEnvironment:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
