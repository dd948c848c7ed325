"""Metrics: unbiased pass@k against hand-computed values, means with missing rewards as 0, errors by cause."""

from __future__ import annotations

import math

import pytest

from evsys.engine import compute_metrics, mean_pass_at_k, pass_at_k
from evsys.records import FailureCause, PhaseTimings, TrialFailure, TrialResult, Usage


def trial(
    task: str, reward: float | None, attempt: int = 1, cause: FailureCause | None = None, **kw
) -> TrialResult:
    return TrialResult(
        trial_name=f"{task}__a__{attempt}",
        task_name=task,
        task_path=f"/t/{task}",
        dataset="ds",
        agent=kw.pop("agent", "oracle"),
        attempt=attempt,
        reward=reward,
        rewards=None if reward is None else {"reward": reward, **kw.pop("extra", {})},
        failure=TrialFailure(cause=cause, message="x") if cause else None,
        **kw,
    )


def test_pass_at_k_hand_computed():
    # n=5, c=2: pass@1 = 2/5; pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7; pass@3 = 1 - C(3,3)/C(5,3) = 0.9
    assert math.isclose(pass_at_k(5, 2, 1), 0.4)
    assert math.isclose(pass_at_k(5, 2, 2), 0.7)
    assert math.isclose(pass_at_k(5, 2, 3), 0.9)
    assert pass_at_k(5, 2, 4) == 1.0  # fewer failures than k
    assert pass_at_k(3, 0, 2) == 0.0
    assert pass_at_k(3, 3, 1) == 1.0


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError, match="need 0 <= c <= n"):
        pass_at_k(2, 3, 1)
    with pytest.raises(ValueError, match="need 1 <= k <= n"):
        pass_at_k(2, 1, 3)


def test_mean_pass_at_k_averages_over_tasks():
    # task a: 1 of 2 correct -> pass@1 0.5, pass@2 1.0; task b: 0 of 2 -> 0, 0
    trials = [
        trial("a", 1.0, 1),
        trial("a", 0.0, 2),
        trial("b", 0.0, 1),
        trial("b", None, 2, FailureCause.AGENT_ERROR),
    ]
    assert mean_pass_at_k(trials, 2) == {1: 0.25, 2: 0.5}


def test_pass_at_k_is_none_for_partial_credit():
    assert mean_pass_at_k([trial("a", 0.5), trial("a", 1.0, 2)], 2) is None


def test_group_metrics_counts_missing_reward_as_zero_and_errors_by_cause():
    trials = [
        trial(
            "a",
            1.0,
            1,
            extra={"style": 0.5},
            usage=Usage(prompt_tokens=10, completion_tokens=3, cost_usd=0.01),
        ),
        trial("b", None, 1, FailureCause.REWARD_MISSING, timing=PhaseTimings(agent_run=2.0, total=3.0)),
        trial("c", 1.0, 1, FailureCause.AGENT_TIMEOUT, timing=PhaseTimings(agent_run=4.0, total=5.0)),
        trial("d", None, 1, FailureCause.CANCELLED),
    ]
    [group] = compute_metrics(trials, n_attempts=1)
    assert group.n_trials == 4
    assert group.n_errors == 3
    assert group.errors_by_cause == {"agent_timeout": 1, "cancelled": 1, "reward_missing": 1}
    assert math.isclose(group.mean_reward, 2 / 3)  # cancelled left out, missing counts 0
    # b and d never produced rewards (count 0); c is known not to report style
    assert group.reward_means == {"reward": 2 / 3, "style": 0.5 / 2}
    assert group.pass_at_k == {1: 2 / 3}
    assert group.timing["agent_run"].mean == 3.0
    assert group.timing["agent_run"].max == 4.0
    assert group.usage.prompt_tokens == 10 and group.usage.cost_usd == 0.01


def test_per_key_mean_counts_failed_trials_of_tasks_reporting_the_key():
    trials = [
        trial("a", 1.0, 1, extra={"style": 1.0}),
        trial("a", None, 2, FailureCause.REWARD_MISSING),
        trial("b", 1.0, 1),
    ]
    [group] = compute_metrics(trials, n_attempts=2)
    assert group.reward_means == {"reward": 2 / 3, "style": 0.5}


def test_metrics_are_grouped_per_agent():
    groups = compute_metrics([trial("a", 1.0), trial("a", 0.0, agent="nop")], n_attempts=1)
    assert [(g.agent, g.mean_reward) for g in groups] == [("oracle", 1.0), ("nop", 0.0)]


def timed(task: str, start: str, finish: str) -> TrialResult:
    return trial(task, 1.0, started_at=f"2026-11-22T{start}+00:00", finished_at=f"2026-11-22T{finish}+00:00")


def test_wall_time_after_a_resume_counts_running_time_only():
    """Two overlapping trials (0-10 s, 5-20 s), the job dead for an hour, one more trial (10 s) on resume."""
    trials = [
        timed("a", "05:00:00", "05:00:10"),
        timed("b", "05:00:05", "05:00:20"),
        timed("c", "06:00:20", "06:00:30"),
    ]
    assert compute_metrics(trials, 1)[0].wall_time_sec == pytest.approx(30.0)


def test_the_per_task_table_leaves_cancelled_trials_out_like_the_summary():
    """After Ctrl-C: two attempts scored 1, one cancelled. Summary mean and per-task cell agree on 1.000."""
    from rich.console import Console

    from evsys.cli.summary import print_summary
    from evsys.records import JobResult

    trials = [trial("t", 1.0, 1), trial("t", 1.0, 2), trial("t", None, 3, FailureCause.CANCELLED)]
    result = JobResult(job_name="j", job_dir="jobs/j", metrics=compute_metrics(trials, 3), trials=trials)
    out = Console(width=200, record=True)
    print_summary(out, result, "jobs/j")
    text = out.export_text()
    summary_row = next(line for line in text.splitlines() if line.startswith("│ oracle"))
    task_row = next(line for line in text.splitlines() if line.startswith("│ t "))
    assert "1.000" in summary_row
    assert "1.000 (cancelled)" in task_row and "0.667" not in text


def test_progress_counts_keep_cancelled_apart_and_mean_reward_per_agent():
    from evsys.engine.metrics import progress_counts

    trials = [
        trial("t1", 1.0, agent="oracle"),
        trial("t2", 1.0, agent="oracle"),
        trial("t1", 0.0, agent="nop", cause=FailureCause.AGENT_TIMEOUT),
        trial("t2", None, agent="nop", cause=FailureCause.CANCELLED),
        trial("t3", 0.5, agent="loop", model="local"),
    ]
    counts = progress_counts(trials)
    assert counts["done"] == 5
    assert counts["errored"] == 1  # the timeout; the cancelled trial is not an error
    assert counts["cancelled"] == 1
    assert counts["mean_reward_by_agent"] == {"loop (local)": 0.5, "nop": 0.0, "oracle": 1.0}


def test_eta_comes_from_this_runs_rate():
    from evsys.cli.progress import clock, eta_seconds

    assert eta_seconds(planned=10, done=4, done_at_start=2, elapsed=20.0) == 60.0  # 2 trials in 20 s, 6 left
    assert eta_seconds(planned=10, done=2, done_at_start=2, elapsed=20.0) is None  # none finished yet
    assert clock(3725) == "1:02:05"


def test_a_groups_usage_is_the_sum_of_its_trials_and_unknown_once_one_cost_is():
    spent = [Usage(prompt_tokens=10, completion_tokens=2, cached_tokens=1, cost_usd=0.25)] * 3
    trials = [trial(f"t{i}", 1.0, usage=u) for i, u in enumerate(spent)]
    [group] = compute_metrics(trials, 1)
    assert group.usage == Usage(prompt_tokens=30, completion_tokens=6, cached_tokens=3, cost_usd=0.75)
    trials.append(trial("t3", 1.0, usage=Usage(prompt_tokens=5, cost_usd=None)))
    [group] = compute_metrics(trials, 1)
    assert group.usage.prompt_tokens == 35 and group.usage.cost_usd is None
