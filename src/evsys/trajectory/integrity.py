"""What a trainer sees of a trial: its reward under an integrity policy, and whether the sample is screened.

A trial's `TrialResult.integrity` lists what it tried against its grader (evsys.records.integrity). Every path
that hands rewards to a trainer (`run_rollouts`, `evsys export`, the TRL, OpenEnv and Tinker integrations)
applies one `IntegrityPolicy` the same way:

- `zero` (the default): a trial with findings gets reward 0 (every reward key 0 too); it stays in its group's
  baseline with the advantage of a wrong answer — also when the trial failed with an error, so a forgery that
  breaks the verifier does not buy an error's place outside the baseline.
- `screen`: the sample keeps its reward but is marked `screened` and left out of its group's baseline; its
  advantage is 0 (a trainer leaves it out of the loss).
- `flag`: the findings are only recorded; the reward is the verifier's (an errored trial stays an error).

A failure the agent caused itself (`agent_exhausted_resources`) is a wrong answer under every policy: reward
0, in the baseline (an error's advantage of 0 would pay a policy about to fail to exhaust its sandbox
instead). A finding of that kind does the same under `zero` and `screen` (never screened: it is no forgery).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from evsys.records import WRONG_ANSWER_CAUSES, FailureCause, IntegrityKind, IntegrityPolicy, TrialResult

INTEGRITY_POLICIES: tuple[str, ...] = tuple(p.value for p in IntegrityPolicy)
WRONG_ANSWER_KINDS = frozenset({IntegrityKind.AGENT_EXHAUSTED_RESOURCES})
"""Finding kinds that make a sample a wrong answer under `screen` too (never screened out of the baseline)."""


class JudgedReward(BaseModel):
    """A trial's reward under a policy: the verifier's (None when there is none), or 0 when it is scored as a
    wrong answer (`zeroed`: in the baseline, also when the trial failed); whether it is screened."""

    reward: float | None
    rewards: dict[str, float] = Field(default_factory=dict)
    zeroed: bool = False
    screened: bool = False

    @property
    def baseline_reward(self) -> float | None:
        """The reward a trainer's group baseline uses; None when the sample leaves it (no reward, or
        screened)."""
        return None if self.screened else self.reward


def integrity_policy(value: IntegrityPolicy | str) -> IntegrityPolicy:
    """`value` as an `IntegrityPolicy`; a ValueError names the choices."""
    try:
        return IntegrityPolicy(value)
    except ValueError:
        raise ValueError(f"integrity must be one of {', '.join(INTEGRITY_POLICIES)}, got {value!r}") from None


def counts_as_wrong_answer(cause: FailureCause | None) -> bool:
    """True for a failure the agent caused itself: it scores 0 and stays in its group's baseline."""
    return cause in WRONG_ANSWER_CAUSES


def judged_reward(result: TrialResult, policy: IntegrityPolicy | str = IntegrityPolicy.ZERO) -> JudgedReward:
    """The reward a trainer gets for `result` under `policy` (see the module docstring)."""
    policy = integrity_policy(policy)
    rewards = dict(result.rewards or {})
    kinds = {f.kind for f in result.integrity} if policy != IntegrityPolicy.FLAG else set()
    forged = bool(kinds - WRONG_ANSWER_KINDS)
    if forged and policy == IntegrityPolicy.SCREEN:
        return JudgedReward(reward=result.reward, rewards=rewards, screened=True)
    if forged or kinds & WRONG_ANSWER_KINDS or counts_as_wrong_answer(result.cause):
        return JudgedReward(reward=0.0, rewards=dict.fromkeys(rewards, 0.0), zeroed=True)
    return JudgedReward(reward=result.reward, rewards=rewards)
