"""What rollouts hand a trainer: one `TrajectoryGroup` per task, holding one `RolloutTrajectory` per sample.

The records only: evsys.trajectory.groups builds a sample from a trial (`rollout_from_trial`: its tokens
flattened, its reward under the integrity policy) and computes a group's advantages and counts
(`finalize_group`); docs/rl.md describes every field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from evsys.records.failure import FailureCause
from evsys.records.integrity import IntegrityFinding
from evsys.records.results import PhaseTimings
from evsys.records.trajectory import Trajectory, Usage

AdvantageMethod = Literal["mean", "mean_std", "leave_one_out"]
WRONG_ANSWER_CAUSES = frozenset({FailureCause.AGENT_EXHAUSTED_RESOURCES})
"""Failure causes that count as a wrong answer (reward 0, in the group's baseline), not as an error."""


class RolloutError(BaseModel):
    """Why a rollout failed: the trial's failure cause and message."""

    cause: FailureCause
    message: str


class RolloutTrajectory(BaseModel):
    """One sample of one task: its tokens, completion text, reward(s), advantage and error, if any."""

    trial_name: str
    task_id: str
    attempt: int
    completion: str = ""
    prompt_token_ids: list[int] = Field(default_factory=list)
    completion_token_ids: list[int] = Field(default_factory=list)
    loss_mask: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    prefix_break: bool = False
    weights_version: int | None = Field(
        None,
        description="The policy weights version that sampled every model turn; None when the model reports "
        "none or turns were sampled by different versions (each step's metrics keep its own).",
    )
    reward: float = 0.0
    rewards: dict[str, float] = Field(default_factory=dict)
    advantage: float = 0.0
    error: RolloutError | None = None
    integrity: list[IntegrityFinding] = Field(
        default_factory=list, description="The trial's integrity findings (empty for an honest trial)."
    )
    zeroed: bool = Field(
        False,
        description="Scored as a wrong answer (reward 0, in the baseline): its findings under "
        "integrity='zero', or a failure the agent caused itself.",
    )
    screened: bool = Field(
        False, description="Left out of its group's baseline for its findings (integrity='screen')."
    )
    usage: Usage = Field(default_factory=Usage)
    timing: PhaseTimings | None = Field(None, description="Seconds per phase of the sample's trial.")
    trajectory: Trajectory | None = Field(None, description="The full ATIF trajectory (per-turn tokens).")

    @property
    def ok(self) -> bool:
        """True when the rollout finished without an error."""
        return self.error is None

    @property
    def in_baseline(self) -> bool:
        """True when the sample takes part in its group's advantages: not screened, and without an error or
        scored as a wrong answer (`zeroed`, or an error the agent caused itself)."""
        if self.screened:
            return False
        return self.error is None or self.zeroed or self.error.cause in WRONG_ANSWER_CAUSES


class TrajectoryGroup(BaseModel):
    """All samples of one task (`group_id`), in attempt order, with group-relative advantages (set by
    evsys.trajectory.groups.finalize_group)."""

    group_id: str
    task_id: str
    prompt: str = ""
    trajectories: list[RolloutTrajectory] = Field(default_factory=list)
    advantage_method: AdvantageMethod = "mean"
    zero_variance: bool = Field(True, description="The scored samples' rewards are all equal (or < 2).")
    n_errors: int = 0
    errors_by_cause: dict[str, int] = Field(default_factory=dict)
    n_with_findings: int = Field(0, description="Samples with at least one integrity finding.")
    n_screened: int = Field(0, description="Samples left out of the baseline for their findings.")

    @property
    def rewards(self) -> list[float]:
        """Every sample's reward, in order (0 for errored samples)."""
        return [t.reward for t in self.trajectories]

    @property
    def advantages(self) -> list[float]:
        """Every sample's advantage, in order (0 for errored samples)."""
        return [t.advantage for t in self.trajectories]
