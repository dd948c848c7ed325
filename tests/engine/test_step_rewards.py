"""How a multi-step trial's reward comes from its steps, and `min_reward` gating (Harbor's rules)."""

from __future__ import annotations

import math

from evsys.engine.trial.multi_step import combine_step_rewards, min_reward_failure
from evsys.records import StepResult


def steps(*rewards: dict[str, float] | None) -> list[StepResult]:
    return [StepResult(name=f"s{i}", rewards=r) for i, r in enumerate(rewards)]


def test_mean_is_per_key_over_scored_steps_with_missing_keys_as_zero():
    got = combine_step_rewards(None, steps({"reward": 1.0, "style": 1.0}, None, {"reward": 0.0}))
    assert got == {"reward": 0.5, "style": 0.5}


def test_final_is_the_last_step_run_even_when_it_was_not_scored():
    assert combine_step_rewards("final", steps({"reward": 1.0}, {"reward": 0.25})) == {"reward": 0.25}
    assert combine_step_rewards("final", steps({"reward": 1.0}, None)) is None


def test_nothing_scored_is_no_reward():
    assert combine_step_rewards("mean", steps(None, None)) is None
    assert combine_step_rewards("mean", []) is None


def test_min_reward_gates_the_reward_key_or_every_listed_key():
    assert min_reward_failure({"reward": 0.5}, 0.5) is None
    assert min_reward_failure({"reward": 0.4}, 0.5) == "reward = 0.4 is below its min_reward 0.5"
    assert min_reward_failure({"reward": 1.0}, {"reward": 0.5, "style": 0.1}) == (
        f"style = {-math.inf} is below its min_reward 0.1"
    )
    assert min_reward_failure(None, 0.0) == f"reward = {-math.inf} is below its min_reward 0.0"
