"""`LLMJudge` over the ModelClient protocol: prompt rendering, score parsing, default score and warnings.

`ScriptedModelClient` (evsys.testing) is a real, if simple, ModelClient: it replies with fixed texts in order
and records the messages it was sent. The judge driven by the real local engine is tested in
test_judge_local_engine.py.
"""

from __future__ import annotations

import pytest

from evsys.model.base import ModelClient
from evsys.testing.scripted_model import ScriptedModelClient
from evsys.verify.functions import run_verifier
from evsys.verify.judge import LLMJudge
from evsys.verify.rubric import Gate, RewardKey, RubricObservation, RubricVerifier, WeightedSum

TEMPLATE = "Question: {prompt}\nReference: {answer}\nAnswer: {action}\nGive 'Score: N' from 0 to 10."


def test_scripted_client_satisfies_the_protocol():
    assert isinstance(ScriptedModelClient(), ModelClient)


async def test_reply_with_a_score_is_parsed_and_normalized():
    client = ScriptedModelClient("The answer is right.\nScore: 8")
    judge = LLMJudge(TEMPLATE, client)
    observation = RubricObservation(prompt="2+2?", data={"answer": 4})
    assert await judge("4", observation) == pytest.approx(0.8)
    assert judge.last_score == pytest.approx(0.8) and judge.last_warning is None
    messages, params = client.requests[0].messages, client.requests[0].params
    assert messages == [
        {"role": "user", "content": "Question: 2+2?\nReference: 4\nAnswer: 4\nGive 'Score: N' from 0 to 10."}
    ]
    assert params.temperature == 0.0


async def test_the_last_score_in_the_reply_wins():
    judge = LLMJudge("{action}", ScriptedModelClient("A score: 2 would be harsh. Final **Score:** 9"))
    assert await judge("x", {}) == pytest.approx(0.9)


async def test_reply_without_a_score_gives_the_default_and_a_warning():
    judge = LLMJudge("{action}", ScriptedModelClient("I cannot grade this."), default_score=0.25)
    assert await judge("x", {}) == 0.25
    assert "judge reply has no score" in judge.last_warning
    assert "I cannot grade this." in judge.last_warning
    assert judge.warnings == [judge.last_warning]


async def test_out_of_range_scores_are_clamped_with_a_warning():
    judge = LLMJudge("{action}", ScriptedModelClient("Score: 14", "Score: 7"))
    assert await judge("x", {}) == 1.0
    assert "outside 0-10; clamped" in judge.last_warning
    assert await judge("x", {}) == pytest.approx(0.7)
    assert judge.last_warning is None and len(judge.warnings) == 1


async def test_custom_pattern_range_and_normalizers():
    raw = LLMJudge(
        "{action}", ScriptedModelClient("verdict=3/5"), score_pattern=r"verdict=(\d)", normalize=False
    )
    assert await raw("x", {}) == 3.0
    ranged = LLMJudge("{action}", ScriptedModelClient("Score: 3"), score_range=(1, 5))
    assert await ranged("x", {}) == pytest.approx(0.5)
    halved = LLMJudge("{action}", ScriptedModelClient("Score: 3"), normalize=lambda s: s / 2)
    assert await halved("x", {}) == 1.5
    whole = LLMJudge("{action}", ScriptedModelClient("PASS 1"), score_pattern=r"\b[01]\b", normalize=False)
    assert await whole("x", {}) == 1.0


def test_template_field_errors_name_the_field():
    judge = LLMJudge("{action} vs {reference}", ScriptedModelClient())
    with pytest.raises(ValueError, match=r"refers to \{reference\}.*available fields: .*action"):
        judge.render("x", RubricObservation(data={"answer": 1}))
    literal = LLMJudge('Reply as JSON {{"score": N}} for {action}', ScriptedModelClient())
    assert literal.render("x", {}) == 'Reply as JSON {"score": N} for x'


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompt_template": "  "}, "non-empty string"),
        ({"score_range": (10, 0)}, "low < high"),
        ({"default_score": float("nan")}, "default_score must be finite"),
    ],
)
def test_bad_judge_settings(kwargs, message):
    settings = {"prompt_template": "{action}", "model": ScriptedModelClient(), **kwargs}
    with pytest.raises(ValueError, match=message):
        LLMJudge(**settings)


async def test_judge_warnings_reach_the_verifier_outcome_and_script_reward_is_gated():
    client = ScriptedModelClient("Score: 6", "no idea")
    rubric = WeightedSum({"tests": Gate(RewardKey(), 1.0), "judge": LLMJudge(TEMPLATE, client)}, [0.5, 0.5])
    verifier = RubricVerifier(rubric)
    data = {"answer": 4}
    good = await run_verifier(verifier, "4", data, rewards={"reward": 1.0}, prompt="2+2?")
    vague = await run_verifier(verifier, "4", data, rewards={"reward": 1.0}, prompt="2+2?")
    assert good.rewards == {"reward": 0.8, "tests": 1.0, "tests.rubric": 1.0, "judge": 0.6}
    assert good.warnings == []
    assert vague.rewards["judge"] == 0.0 and vague.rewards["reward"] == 0.5
    assert len(vague.warnings) == 1 and "no score" in vague.warnings[0]


async def test_a_failing_judge_model_is_a_recorded_verifier_error():
    class DownClient(ScriptedModelClient):
        async def complete(self, messages, *, tools=None, params=None):
            raise ConnectionError("judge server unreachable")

    outcome = await run_verifier(RubricVerifier(LLMJudge("{action}", DownClient())), "x")
    assert "ConnectionError: judge server unreachable" in outcome.error


async def test_a_model_string_is_resolved_on_first_use():
    judge = LLMJudge("{action}", "nosuchprovider:model")
    with pytest.raises(ValueError, match="unknown model provider 'nosuchprovider'"):
        await judge("x", {})
