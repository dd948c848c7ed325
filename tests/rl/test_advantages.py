"""Group advantages: mean, mean/std, leave-one-out; zero-variance and size-1 groups; bad rewards."""

from __future__ import annotations

import math

import pytest

from evsys.trajectory.advantages import (
    GroupAdvantages,
    compute_advantages,
    leave_one_out_advantages,
    mean_advantages,
    mean_std_advantages,
)

REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 0.25]


@pytest.mark.parametrize("method", ["mean", "mean_std", "leave_one_out"])
def test_advantages_sum_to_zero_and_keep_order(method):
    result = compute_advantages(REWARDS, method)
    assert result.method == method and not result.zero_variance
    assert len(result.values) == len(REWARDS)
    assert math.fsum(result.values) == pytest.approx(0.0, abs=1e-12)
    # higher reward, higher advantage: the ranking is the rewards' ranking
    order = sorted(range(len(REWARDS)), key=lambda i: REWARDS[i])
    assert sorted(range(len(REWARDS)), key=lambda i: result.values[i]) == order


def test_mean_advantages_values():
    assert mean_advantages([1.0, 0.0, 0.5]).values == pytest.approx([0.5, -0.5, 0.0])


def test_mean_std_divides_by_the_population_std():
    result = mean_std_advantages([1.0, 0.0], eps=0.0)
    assert result.values == pytest.approx([1.0, -1.0])
    unbiased = mean_std_advantages([1.0, 0.0], eps=0.0, unbiased=True)
    assert unbiased.values == pytest.approx([0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5)])
    with_eps = mean_std_advantages([1.0, 0.0], eps=1.0)
    assert with_eps.values == pytest.approx([1 / 3, -1 / 3])  # 0.5 / (std 0.5 + eps 1)


def test_leave_one_out_compares_with_the_others():
    result = leave_one_out_advantages([1.0, 0.0, 0.0, 0.0])
    assert result.values == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])
    n = len(REWARDS)
    scaled = [a * (n - 1) / n for a in leave_one_out_advantages(REWARDS).values]
    assert scaled == pytest.approx(mean_advantages(REWARDS).values)


@pytest.mark.parametrize("method", ["mean", "mean_std", "leave_one_out"])
def test_equal_rewards_are_flagged_zero_variance(method):
    result = compute_advantages([0.5, 0.5, 0.5], method)
    assert result == GroupAdvantages(values=[0.0, 0.0, 0.0], zero_variance=True, method=method)


@pytest.mark.parametrize("method", ["mean", "mean_std", "leave_one_out"])
def test_a_group_of_one_gets_zero_and_is_flagged(method):
    assert compute_advantages([1.0], method) == GroupAdvantages(
        values=[0.0], zero_variance=True, method=method
    )
    assert compute_advantages([], method).values == []


def test_bad_rewards_and_methods_are_clear_errors():
    with pytest.raises(ValueError, match="reward 1 is nan"):
        mean_advantages([1.0, math.nan])
    with pytest.raises(ValueError, match="reward 0 is str"):
        mean_advantages(["1"])
    with pytest.raises(ValueError, match=r"unknown advantage method 'grpo'.*mean_std"):
        compute_advantages([1.0, 0.0], "grpo")
    with pytest.raises(ValueError, match="eps must be finite"):
        mean_std_advantages([1.0, 0.0], eps=-1.0)
