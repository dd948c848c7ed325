"""Group-relative advantages: each sample's reward compared with the other samples of the same prompt.

Methods (n = group size, r = rewards):

- `mean`: r_i - mean(r). Sums to 0 over the group.
- `mean_std`: (r_i - mean(r)) / (std(r) + eps), the GRPO form; std is the population std (ddof 0) unless
  `unbiased=True`. Sums to 0 over the group.
- `leave_one_out`: r_i - mean(r without r_i), the RLOO baseline; equals n/(n-1) * (r_i - mean). Sums to 0.

A group whose rewards are all equal carries no learning signal: every advantage is 0 and `zero_variance` is
set so a trainer can drop it. A group of size 1 has no baseline at all: its advantage is [0.0] and it is
flagged `zero_variance` too (documented choice: a lone sample never gets a made-up signal). An empty group
returns empty values, flagged. Non-finite rewards raise ValueError naming the index.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import get_args

from pydantic import BaseModel, Field

from evsys.records import AdvantageMethod

ADVANTAGE_METHODS: tuple[AdvantageMethod, ...] = get_args(AdvantageMethod)

ZERO_VARIANCE_TOL = 1e-12
"""Rewards whose max - min is at most this are treated as all equal."""


class GroupAdvantages(BaseModel):
    """The advantages of one group, in the rewards' order, and whether the group carries no signal."""

    values: list[float] = Field(default_factory=list)
    zero_variance: bool = Field(description="All rewards equal, or fewer than 2: every advantage is 0.")
    method: AdvantageMethod = "mean"


def _checked(rewards: Sequence[float]) -> list[float]:
    values = []
    for i, reward in enumerate(rewards):
        if isinstance(reward, bool) or not isinstance(reward, int | float):
            raise ValueError(f"reward {i} is {type(reward).__name__} {reward!r}, expected a number")
        if not math.isfinite(reward):
            raise ValueError(f"reward {i} is {reward}, expected a finite number")
        values.append(float(reward))
    return values


def _is_flat(values: list[float]) -> bool:
    return len(values) < 2 or max(values) - min(values) <= ZERO_VARIANCE_TOL


def _flat(values: list[float], method: AdvantageMethod) -> GroupAdvantages:
    return GroupAdvantages(values=[0.0] * len(values), zero_variance=True, method=method)


def mean_advantages(rewards: Sequence[float]) -> GroupAdvantages:
    """r_i - mean(r)."""
    values = _checked(rewards)
    if _is_flat(values):
        return _flat(values, "mean")
    mean = math.fsum(values) / len(values)
    return GroupAdvantages(values=[r - mean for r in values], zero_variance=False, method="mean")


def mean_std_advantages(
    rewards: Sequence[float], *, eps: float = 1e-6, unbiased: bool = False
) -> GroupAdvantages:
    """(r_i - mean(r)) / (std(r) + eps); population std unless `unbiased`."""
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be finite and >= 0, got {eps}")
    values = _checked(rewards)
    if _is_flat(values):
        return _flat(values, "mean_std")
    n = len(values)
    mean = math.fsum(values) / n
    variance = math.fsum((r - mean) ** 2 for r in values) / (n - 1 if unbiased else n)
    scale = math.sqrt(variance) + eps
    return GroupAdvantages(
        values=[(r - mean) / scale for r in values], zero_variance=False, method="mean_std"
    )


def leave_one_out_advantages(rewards: Sequence[float]) -> GroupAdvantages:
    """r_i - mean of the other rewards."""
    values = _checked(rewards)
    if _is_flat(values):
        return _flat(values, "leave_one_out")
    n = len(values)
    total = math.fsum(values)
    advantages = [r - (total - r) / (n - 1) for r in values]
    return GroupAdvantages(values=advantages, zero_variance=False, method="leave_one_out")


def compute_advantages(
    rewards: Sequence[float], method: AdvantageMethod = "mean", *, eps: float = 1e-6
) -> GroupAdvantages:
    """Advantages of one group by `method` ("mean", "mean_std" or "leave_one_out")."""
    if method == "mean":
        return mean_advantages(rewards)
    if method == "mean_std":
        return mean_std_advantages(rewards, eps=eps)
    if method == "leave_one_out":
        return leave_one_out_advantages(rewards)
    raise ValueError(f"unknown advantage method {method!r}; choose one of {', '.join(ADVANTAGE_METHODS)}")
