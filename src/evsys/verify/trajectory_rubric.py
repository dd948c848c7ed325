"""`TrajectoryRubric`: a reward over every model turn of a trajectory, with discounting.

`per_turn(turn, observation)` (sync or async) scores one model turn (`Turn`: its text, tool calls, tool
results and the environment's reply that followed it); the rubric's score is the discounted return
`sum(gamma**t * r_t for t, r_t in enumerate(turn scores))` over the trajectory's model turns (`gamma=1`: the
plain sum). Under `RubricVerifier` each turn's own score is a reward key as well — `turn_1`, `turn_2`, ...
(prefixed with the rubric's dotted name when it is a child, e.g. `dialogue.turn_1`) — beside the total and
the other rubrics' keys, so result.json and the exports keep the per-turn rewards.

It reads `observation.trajectory` (what the engine passes every verifier); a trajectory without model
turns scores 0. Any `Rubric` can score the whole trajectory the same way in its own `forward`.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from evsys.records import ToolCall, Trajectory
from evsys.verify.base import finite_number
from evsys.verify.rubric import Rubric, record_scores


class Turn(BaseModel):
    """One model turn as `per_turn` sees it."""

    index: int = Field(description="0-based position among the model turns.")
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_results: list[str] = Field(default_factory=list, description="The tool outputs the turn got.")
    reply: str | None = Field(None, description="The environment's reply after the turn (a user step).")


def turns_of(trajectory: Trajectory | None) -> list[Turn]:
    """The model turns of `trajectory`, each with the user message that followed it (if any)."""
    steps = trajectory.steps if trajectory is not None else []
    turns: list[Turn] = []
    for position, step in enumerate(steps):
        if step.source != "agent":
            continue
        after = steps[position + 1] if position + 1 < len(steps) else None
        results = step.observation.results if step.observation is not None else []
        turns.append(
            Turn(
                index=len(turns),
                text=step.message,
                tool_calls=list(step.tool_calls or []),
                tool_results=[str(r.content) for r in results],
                reply=after.message if after is not None and after.source == "user" else None,
            )
        )
    return turns


def discounted_return(scores: list[float], gamma: float) -> float:
    """`sum(gamma**t * scores[t])`."""
    return sum(gamma**t * score for t, score in enumerate(scores))


class TrajectoryRubric(Rubric):
    """The discounted return of per-turn scores (see the module docstring)."""

    def __init__(self, per_turn: Callable[[Turn, Any], Any], gamma: float = 1.0) -> None:
        super().__init__()
        if not callable(per_turn):
            raise TypeError(f"per_turn must be callable, got {type(per_turn).__name__}")
        if not math.isfinite(float(gamma)) or not 0 < gamma <= 1:
            raise ValueError(f"gamma must be in (0, 1], got {gamma}")
        self.per_turn = per_turn
        self.gamma = float(gamma)

    async def _score(self, turn: Turn, observation: Any) -> float:
        if inspect.iscoroutinefunction(self.per_turn):
            value = await self.per_turn(turn, observation)
        else:
            value = await asyncio.to_thread(self.per_turn, turn, observation)
        return finite_number(value, f"per_turn of turn {turn.index + 1} returned")

    async def forward(self, action: Any, observation: Any) -> float:
        """Score every model turn of `observation.trajectory`; the discounted return."""
        turns = turns_of(observation.trajectory if observation is not None else None)
        scores = [await self._score(turn, observation) for turn in turns]
        record_scores(self, {f"turn_{n}": score for n, score in enumerate(scores, start=1)})
        return discounted_return(scores, self.gamma)
