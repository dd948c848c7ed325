"""`TrajectoryRubric`: per-turn scores over a trajectory's model turns, discounted (sum of gamma**t * r_t),
each turn's score a reward key beside the total, also as a child of a `WeightedSum` next to an outcome
rubric, and end to end in result.json of a multi-turn task."""

from __future__ import annotations

import json

import pytest
from author_hooks import token_reply

from evsys import VerifiedTask, run_rollouts
from evsys.records import AgentInfo, TrajectoryRecorder
from evsys.testing.scripted_model import ScriptedModelClient
from evsys.verify.functions import register_verifier, unregister_verifier
from evsys.verify.rubric import Rubric, RubricObservation, RubricVerifier, WeightedSum
from evsys.verify.trajectory_rubric import TrajectoryRubric, turns_of


def _dialogue(*pairs: tuple[str, str | None]):
    recorder = TrajectoryRecorder("t", AgentInfo(name="loop"))
    recorder.add("user", "Guess my number.")
    for said, reply in pairs:
        recorder.add("agent", said)
        if reply is not None:
            recorder.add("user", reply)
    return recorder.build()


def close_to_seven(turn, observation) -> float:
    """1 for the right guess, 0.5 when the environment says it is close, else 0."""
    if turn.text == str(observation.data["secret"]):
        return 1.0
    return 0.5 if turn.reply == "close" else 0.0


class SaysSeven(Rubric):
    def forward(self, action, observation) -> float:
        return float(action == "7")


async def test_the_discounted_return_of_per_turn_scores_and_each_turn_as_a_key():
    trajectory = _dialogue(("3", "far"), ("6", "close"), ("7", None))
    turns = turns_of(trajectory)
    assert [(t.index, t.text, t.reply) for t in turns] == [(0, "3", "far"), (1, "6", "close"), (2, "7", None)]
    verifier = RubricVerifier(TrajectoryRubric(close_to_seven, gamma=0.9))
    result = await verifier("7", trajectory=trajectory, secret=7)
    assert result.rewards == pytest.approx(
        {"reward": 0.0 + 0.9 * 0.5 + 0.81 * 1.0, "turn_1": 0.0, "turn_2": 0.5, "turn_3": 1.0}
    )
    undiscounted = await TrajectoryRubric(close_to_seven)(
        "7", RubricObservation(data={"secret": 7}, trajectory=trajectory)
    )
    assert undiscounted == pytest.approx(1.5)


async def test_beside_an_outcome_rubric_its_turn_keys_are_under_its_name():
    trajectory = _dialogue(("6", "close"), ("7", None))
    rubric = WeightedSum({"outcome": SaysSeven(), "dialogue": TrajectoryRubric(close_to_seven, gamma=0.5)})
    result = await RubricVerifier(rubric)("7", trajectory=trajectory, secret=7)
    assert result.rewards == pytest.approx(
        {
            "reward": 0.5 * 1.0 + 0.5 * (0.5 + 0.5 * 1.0),
            "outcome": 1.0,
            "dialogue": 1.0,
            "dialogue.turn_1": 0.5,
            "dialogue.turn_2": 1.0,
        }
    )


def test_gamma_outside_zero_to_one_is_refused():
    for gamma in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="gamma must be in"):
            TrajectoryRubric(close_to_seven, gamma=gamma)


async def test_per_turn_rewards_reach_result_json_of_a_multi_turn_task(tmp_path):
    register_verifier("guess_dialogue", RubricVerifier(TrajectoryRubric(close_to_seven, gamma=0.9)))
    try:
        task = VerifiedTask(
            id="guess",
            prompt="Guess my number between 1 and 10.",
            verifier="guess_dialogue",
            data={"secret": 7},
            respond="author_hooks:guessing_game",
            max_turns=4,
        )
        client = ScriptedModelClient(token_reply("5"), token_reply("7"))
        groups = await run_rollouts([task], model=client, jobs_dir=tmp_path, job_name="j", max_retries=0)
    finally:
        unregister_verifier("guess_dialogue")
    sample = groups[0].trajectories[0]
    assert sample.rewards == pytest.approx({"reward": 0.9, "turn_1": 0.0, "turn_2": 1.0})
    result = json.loads((tmp_path / "j" / sample.trial_name / "result.json").read_text())
    assert result["rewards"] == pytest.approx({"reward": 0.9, "turn_1": 0.0, "turn_2": 1.0})
