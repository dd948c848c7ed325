"""`LLMJudge` driven by the real in-process engine: a tiny Qwen2 model trained (offline, seconds) to grade.

The model is trained on two judge exchanges: it answers the prompt for a right answer with a score and the
prompt for a nonsense answer without one. The judge must parse the first and fall back (with a warning) on the
second. Real weights, real tokens, greedy decoding.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evsys.model.base import SamplingParams
from evsys.testing import TinyModelRecipe, TrainingChat, build_tiny_model
from evsys.verify.functions import run_verifier
from evsys.verify.judge import LLMJudge
from evsys.verify.rubric import RubricObservation, RubricVerifier

TEMPLATE = "Question: {prompt}\nAnswer: {action}\nGrade the answer."
QUESTION = "What is 2+2?"
OTHER_QUESTION = "Name a colour of the sky."
SCORED_REPLY = "The answer is right. Score: 9"
UNSCORED_REPLY = "I cannot grade this."


def _chat(question: str, action: str, reply: str) -> TrainingChat:
    prompt = TEMPLATE.format(prompt=question, action=action)
    return TrainingChat(
        messages=[{"role": "user", "content": prompt}, {"role": "assistant", "content": reply}]
    )


JUDGE_RECIPE = TinyModelRecipe(
    chats=[_chat(QUESTION, "4", SCORED_REPLY), _chat(OTHER_QUESTION, "banana", UNSCORED_REPLY)],
    train_steps=300,
)


@pytest.fixture(scope="module")
def judge_model_dir() -> Path:
    """The tiny judge model (built once, then reused from evsys's cache)."""
    return build_tiny_model(JUDGE_RECIPE)


@pytest.mark.needs_model
async def test_local_engine_judge_parses_a_score_and_falls_back_without_one(judge_model_dir: Path):
    judge = LLMJudge(
        TEMPLATE, f"local:{judge_model_dir}", params=SamplingParams(temperature=0.0, max_tokens=32)
    )
    try:
        observation = RubricObservation(prompt=QUESTION)
        assert await judge("4", observation) == pytest.approx(0.9)
        assert judge.last_reply == SCORED_REPLY and judge.last_warning is None

        other = RubricObservation(prompt=OTHER_QUESTION)
        assert await judge("banana", other) == 0.0
        assert judge.last_reply == UNSCORED_REPLY
        assert "judge reply has no score" in judge.last_warning

        outcome = await run_verifier(RubricVerifier(judge), "banana", {}, prompt=OTHER_QUESTION)
        assert outcome.ok and outcome.rewards == {"reward": 0.0}
        assert len(outcome.warnings) == 1 and UNSCORED_REPLY in outcome.warnings[0]
    finally:
        await judge.aclose()
