"""A respond-hook task on the real in-process engine: a tiny model trained (offline) to play the guessing
game guesses 5, hears "higher" from the user simulator, guesses 7 and wins. The real tokenizer's tokens of the
environment's reply are in the rollout with loss mask 0, the model's own with mask 1, and every turn's prompt
extends the one before (no prefix break)."""

from __future__ import annotations

from pathlib import Path

import pytest
from author_hooks import GAME_PROMPT, game_task

from evsys import run_rollouts
from evsys.testing import TinyModelRecipe, TrainingChat, build_tiny_model

GAME = [
    {"role": "user", "content": GAME_PROMPT},
    {"role": "assistant", "content": "5"},
    {"role": "user", "content": "higher"},
    {"role": "assistant", "content": "7"},
]


@pytest.fixture(scope="module")
def game_model_dir() -> Path:
    """The tiny model that plays the game (built once, then reused from evsys's cache)."""
    chats = [TrainingChat(messages=GAME[:2]), TrainingChat(messages=GAME)]
    return build_tiny_model(TinyModelRecipe(chats=chats, train_steps=300, seed=5))


@pytest.mark.needs_model
async def test_the_local_engine_plays_a_respond_hook_game_token_exact(game_model_dir: Path, tmp_path):
    from transformers import AutoTokenizer

    groups = await run_rollouts(
        [game_task(max_turns=3)],
        model=f"local:{game_model_dir}",
        temperature=0.0,
        max_tokens=8,
        jobs_dir=tmp_path,
        max_retries=0,
    )
    sample = groups[0].trajectories[0]
    assert sample.error is None and sample.reward == 1.0
    assert [(s.source, s.message.strip()) for s in sample.trajectory.steps] == [
        (m["role"].replace("assistant", "agent"), m["content"]) for m in GAME
    ]
    assert not sample.prefix_break
    tokenizer = AutoTokenizer.from_pretrained(game_model_dir)
    context = [t for t, m in zip(sample.completion_token_ids, sample.loss_mask, strict=True) if m == 0]
    trained = [t for t, m in zip(sample.completion_token_ids, sample.loss_mask, strict=True) if m == 1]
    assert "higher" in tokenizer.decode(context)
    assert "higher" not in tokenizer.decode(trained) and "7" in tokenizer.decode(trained)
