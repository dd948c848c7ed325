"""Module-level tools, respond hooks and verifiers of the author-turns tests (custom tools and hooks are
referenced by import name, so they live at module level). `CALLS` records what each custom tool was called
with, so a test sees that it ran and with which (validated) arguments."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from pydantic import Field

from evsys.model.base import Completion
from evsys.task.turns import Done
from evsys.testing.scripted_model import ScriptedRequest

CALLS: list[tuple[str, Any]] = []
USER, ASSISTANT, END = 1, 2, 3  # the token-level chat template of `token_reply`


Country = Annotated[str, Field(description="A country's English name")]


def capital(country: Country, upper: bool = False) -> str:
    """The capital city of a country."""
    CALLS.append(("capital", (country, upper)))
    city = {"France": "Paris", "Japan": "Tokyo"}.get(country, "unknown")
    return city.upper() if upper else city


async def add(a: int, b: int) -> dict[str, int]:
    """Add two integers."""
    CALLS.append(("add", (a, b)))
    return {"sum": a + b}


def slow(seconds: float) -> str:
    """Sleep, then answer."""
    import time

    time.sleep(seconds)
    return "late"


def guessing_game(history: list[dict[str, Any]], state: dict[str, Any]) -> str | Done:
    """A user simulator: says "higher"/"lower" until the model names `state["secret"]`."""
    state["guesses"] = state.get("guesses", 0) + 1
    guess = int("".join(ch for ch in history[-1]["content"] if ch.isdigit()) or 0)
    if guess == state["secret"]:
        return Done(reason="guessed")
    return "higher" if guess < state["secret"] else "lower"


async def broken_simulator(history: list[dict[str, Any]], state: dict[str, Any]) -> str:
    """A respond hook that fails."""
    await asyncio.sleep(0)
    raise RuntimeError("the simulator crashed")


def guesses_left(completion: str, trajectory: Any = None) -> float:
    """1 when the last answer is 7."""
    return float("7" in completion)


def _tokens(text: str) -> list[int]:
    return [10 + ord(ch) for ch in text]


def render(messages: list[dict[str, Any]]) -> list[int]:
    """A toy chat template over characters: each message framed by its role and END, then the assistant's."""
    ids: list[int] = []
    for message in messages:
        role = ASSISTANT if message["role"] == "assistant" else USER
        ids += [role, *_tokens(str(message.get("content") or "")), END]
    return [*ids, ASSISTANT]


def token_reply(text: str):
    """A scripted reply with token ids (prompt rendered by `render`), so trajectories are token-exact."""

    def reply(request: ScriptedRequest) -> Completion:
        ids = [*_tokens(text), END]
        return Completion(
            text=text,
            prompt_token_ids=render(request.messages),
            completion_token_ids=ids,
            logprobs=[-0.5] * len(ids),
        )

    return reply


def guess_by_history(request: ScriptedRequest) -> Completion:
    """A scripted policy for the guessing game whatever order samples run in: 5 first, then 7 or 3."""
    last = request.messages[-1]["content"]
    guess = {"higher": "7", "lower": "3"}.get(last, "5")
    return token_reply(guess)(request)


GAME_PROMPT = "Guess my number between 1 and 10."


def game_task(**fields: Any) -> Any:
    """The guessing game as a Python task (secret 7, `guessing_game` answering), `fields` added."""
    from evsys import VerifiedTask

    return VerifiedTask(
        id="game",
        prompt=GAME_PROMPT,
        verifier="author_hooks:guesses_left",
        data={"secret": 7},
        respond="author_hooks:guessing_game",
        **fields,
    )


def peek(state: dict[str, Any]) -> str:
    """Whether the secret is odd or even (reads the episode's state, which the model cannot pass)."""
    CALLS.append(("peek", dict(state)))
    return "odd" if state["secret"] % 2 else "even"


SERVED_ROW = {
    "id": "game",
    "prompt": "Guess my number between 1 and 10; ask for capitals if you like.",
    "verifier": "author_hooks:guesses_left",
    "data": {"secret": 7},
    "tools": ["author_hooks:capital", "submit"],
    "respond": "author_hooks:guessing_game",
    "max_turns": 8,
}
"""The guessing game as a dataset row with the `capital` custom tool and `submit` only (what is served)."""


def game_dataset(root: Any, *rows: dict[str, Any]) -> Any:
    """A Python-task dataset directory at `root` (a pathlib.Path) with `rows` (default: SERVED_ROW)."""
    import json

    root.mkdir()
    (root / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows or [SERVED_ROW]))
    (root / "dataset.toml").write_text('[dataset]\nname = "game"\ndata = "tasks.jsonl"\n')
    return root
