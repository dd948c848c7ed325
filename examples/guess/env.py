"""The environment of examples/guess: a custom tool (`hint`), a user simulator (`user_simulator`, the
respond hook) and a trajectory-level reward (`guess_reward`: each turn's guess, discounted)."""

from __future__ import annotations

import re
from typing import Any, Literal

from evsys.task.turns import Done
from evsys.verify.functions import register_verifier
from evsys.verify.rubric import RubricVerifier
from evsys.verify.trajectory_rubric import TrajectoryRubric, Turn


def _guess(text: str) -> int | None:
    numbers = re.findall(r"-?\d+", text)
    return int(numbers[-1]) if numbers else None


def hint(state: dict[str, Any], kind: Literal["parity", "half"] = "parity") -> str:
    """A hint about the secret number: whether it is even or odd ("parity"), or which half of 1-20 it is in
    ("half")."""
    state["hints"] = state.get("hints", 0) + 1  # `state` is the episode's (the model never passes it)
    secret = state["secret"]
    if kind == "parity":
        return "even" if secret % 2 == 0 else "odd"
    return "1-10" if secret <= 10 else "11-20"


def user_simulator(history: list[dict[str, Any]], state: dict[str, Any]) -> str | Done:
    """The user: says whether each guess is too low or too high, and is done once the number is guessed."""
    guess = _guess(str(history[-1].get("content") or ""))
    if guess is None:
        return "Please answer with a number."
    if guess == state["secret"]:
        return Done(reason="guessed")
    return f"{guess} is too {'low' if guess < state['secret'] else 'high'}: guess again."


def correct_guess(turn: Turn, observation: Any) -> float:
    """1 for a turn that names the secret, else 0."""
    return float(_guess(turn.text) == observation.data["secret"])


# the reward over all turns: an earlier right guess is worth more (0.8 per turn it took longer)
register_verifier("guess_reward", RubricVerifier(TrajectoryRubric(correct_guess, gamma=0.8)))
