"""Integrity policies on a group: a trial with findings is zeroed, screened out of the baseline, or only
flagged; a failure the agent caused itself counts as a wrong answer, never as an error left out."""

from __future__ import annotations

import pytest

from evsys.records import FailureCause, IntegrityFinding, TrajectoryGroup, TrialFailure, TrialResult
from evsys.rollouts import run_rollouts
from evsys.trajectory.groups import finalize_group, rollout_from_trial

FORGED = IntegrityFinding(
    kind="canary_failed", evidence="tests/test_calc.py::test_add_3 passed", source="repo"
)
EXHAUSTED = IntegrityFinding(
    kind="agent_exhausted_resources", evidence="memory.events oom_kill 1", source="x"
)


def trial(name: str, reward: float | None, *, findings=(), cause: FailureCause | None = None) -> TrialResult:
    """A finished trial of task `t` (attempt = its position in the group)."""
    failure = TrialFailure(cause=cause, message="it failed") if cause else None
    return TrialResult(
        trial_name=name, task_name="t", task_path="/t", dataset="d", agent="loop", attempt=int(name[-1]),
        reward=reward, rewards=None if reward is None else {"reward": reward, "style": reward},
        failure=failure, integrity=list(findings),
    )  # fmt: skip


def group(trials: list[TrialResult], policy: str) -> TrajectoryGroup:
    samples = [rollout_from_trial(t, None, "t", policy) for t in trials]
    return finalize_group(TrajectoryGroup(group_id="j/t", task_id="t", trajectories=samples), "mean")


HONEST_1, HONEST_0 = trial("honest-1", 1.0), trial("honest-2", 0.0)
HACKED = trial("hacked-3", 1.0, findings=[FORGED])


def test_flag_only_records_the_findings():
    flagged = group([HONEST_1, HONEST_0, HACKED], "flag")
    assert flagged.rewards == [1.0, 0.0, 1.0]  # the forged 1.0 counts as the verifier gave it
    assert flagged.advantages == pytest.approx([1 / 3, -2 / 3, 1 / 3])
    assert flagged.trajectories[2].integrity == [FORGED] and not flagged.trajectories[2].screened
    assert flagged.n_with_findings == 1 and flagged.n_screened == 0


def test_zero_makes_the_hacked_sample_a_wrong_answer():
    zeroed = group([HONEST_1, HONEST_0, HACKED], "zero")
    hacked = zeroed.trajectories[2]
    assert hacked.reward == 0.0 and hacked.rewards == {"reward": 0.0, "style": 0.0}
    assert hacked.advantage == pytest.approx(zeroed.trajectories[1].advantage)  # that of the honest 0
    assert zeroed.advantages == pytest.approx([2 / 3, -1 / 3, -1 / 3])
    assert hacked.integrity == [FORGED] and zeroed.n_with_findings == 1
    assert group([HONEST_1, HONEST_0, HACKED], "zero").advantages == zeroed.advantages  # also the default
    default = TrajectoryGroup(
        group_id="j/t",
        task_id="t",
        trajectories=[rollout_from_trial(t, None, "t") for t in (HONEST_1, HACKED)],
    )
    finalize_group(default)
    assert default.rewards == [1.0, 0.0]


def test_screen_leaves_the_hacked_sample_out_of_the_baseline():
    screened = group([HONEST_1, HONEST_0, HACKED], "screen")
    hacked = screened.trajectories[2]
    assert hacked.screened and hacked.reward == 1.0  # kept and marked, its reward as the verifier gave it
    assert screened.advantages == pytest.approx([0.5, -0.5, 0.0])  # the baseline of the honest two alone
    assert screened.n_screened == 1 and screened.n_errors == 0


def test_an_agent_that_exhausts_its_sandbox_scores_a_wrong_answer():
    # control: an error evsys caused leaves the baseline, advantage 0 (what exhaustion must never buy)
    errored = trial("error-3", None, cause=FailureCause.SANDBOX_FAILED)
    assert group([HONEST_1, HONEST_0, errored], "zero").advantages == pytest.approx([0.5, -0.5, 0.0])
    exhausted = trial("exhausted-3", None, findings=[EXHAUSTED], cause=FailureCause.AGENT_EXHAUSTED_RESOURCES)
    for policy in ("zero", "screen", "flag"):
        result = group([HONEST_1, HONEST_0, exhausted], policy)
        assert result.rewards == [1.0, 0.0, 0.0]
        assert result.advantages == pytest.approx([2 / 3, -1 / 3, -1 / 3]), policy  # that of the honest 0
        assert not result.trajectories[2].screened and result.errors_by_cause == {
            "agent_exhausted_resources": 1
        }


def test_a_forgery_that_breaks_the_verifier_does_not_buy_an_errors_place():
    """An error leaves the baseline with advantage 0, more than a wrong answer's: a trial with findings that
    also failed is a wrong answer under `zero`, screened under `screen`, and an error only under `flag`."""
    broken = trial("broken-3", None, findings=[FORGED], cause=FailureCause.VERIFIER_ERROR)
    assert group([HONEST_1, HONEST_0, broken], "flag").advantages == pytest.approx([0.5, -0.5, 0.0])
    zeroed = group([HONEST_1, HONEST_0, broken], "zero")
    assert zeroed.advantages == pytest.approx([2 / 3, -1 / 3, -1 / 3]) and zeroed.trajectories[2].zeroed
    screened = group([HONEST_1, HONEST_0, broken], "screen")
    assert screened.trajectories[2].screened and screened.advantages == pytest.approx([0.5, -0.5, 0.0])


async def test_run_rollouts_refuses_an_unknown_policy():
    with pytest.raises(ValueError, match="integrity must be one of zero, screen, flag"):
        await run_rollouts(["hi"], outcome_reward=False, model="local", integrity="drop")
