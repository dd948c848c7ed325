"""Fixtures for the rollout tests: a tiny model trained to answer three sums, shared by every test here."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from evsys.testing.tiny_model import TinyModelRecipe, TrainingChat, build_tiny_model
from evsys.verify.functions import register_verifier, unregister_verifier

QUESTIONS = {"What is 19+23?": "42", "What is 7*6?": "42", "What is 50-8?": "42"}
_names = itertools.count()


def math_recipe() -> TinyModelRecipe:
    """Three arithmetic questions, each answered with its number."""
    chats = [
        TrainingChat(messages=[{"role": "user", "content": q}, {"role": "assistant", "content": a}])
        for q, a in QUESTIONS.items()
    ]
    return TinyModelRecipe(chats=chats, train_steps=200, seed=3, context_window=4096)


@pytest.fixture
def questions() -> list[str]:
    """The questions the tiny math model was trained on (the answer is 42 for each)."""
    return list(QUESTIONS)


@pytest.fixture(scope="session")
def math_model_dir() -> Path:
    """The tiny math model (built once, then reused from evsys's cache)."""
    return build_tiny_model(math_recipe())


@pytest.fixture(scope="session")
def math_client(math_model_dir: Path):
    """One loaded client for the whole session (lent to each run, never closed by a job)."""
    from evsys.model.spec import create_model_client

    return create_model_client(f"local:{math_model_dir}")


@pytest.fixture
def fresh_verifier():
    """Register verifiers under unique names for one test; unregistered afterwards."""
    names: list[str] = []

    def register(fn) -> str:
        name = f"rollout-test-{next(_names)}"
        register_verifier(name, fn)
        names.append(name)
        return name

    yield register
    for name in names:
        unregister_verifier(name)
