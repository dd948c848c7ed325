"""Job metrics per (agent, model, dataset): mean reward, per-key means, pass@k, errors, timing, usage.

Definitions (also in docs/jobs.md):
- mean reward: mean of each trial's primary reward; a trial with no reward counts 0. Cancelled trials (which a
  resume reruns) are left out of the reward figures but counted in `errors_by_cause`.
- per-key means: for each reward key, the mean over the trials, leaving out the tasks known not to report
  that key (they produced rewards, never with this key); a trial with no reward counts 0. So a key only one
  task reports is not diluted by the other tasks, and failures still pull the mean down.
- pass@k: only when every reward is exactly 0 or 1; per task, with n trials and c successes,
  pass@k = 1 - C(n-c, k) / C(n, k) (the unbiased estimator), averaged over the tasks that have n >= k;
  for k = 1..n_attempts.
- integrity: `n_with_findings` counts the trials with at least one integrity finding (cancelled included),
  `findings_by_kind` per kind the trials with at least one finding of that kind.
- timing: mean, median and max seconds of each phase over the trials that ran it; wall time is the time at
  least one trial ran (a resumed job does not count the time it lay dead), for a group and for the job.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from datetime import datetime
from math import comb
from typing import Any

from evsys.records import PHASES, FailureCause, GroupMetrics, JobResult, TimingStats, TrialResult, Usage
from evsys.records.trajectory import add_costs


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: n samples, c of them correct: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def scored(trials: list[TrialResult]) -> list[TrialResult]:
    """The trials that count in reward figures: every one but the cancelled (a resume reruns those). Every
    table of rewards (summary, per-task, progress, viewer) uses this one rule."""
    return [t for t in trials if t.cause != FailureCause.CANCELLED]


def _reward(trial: TrialResult) -> float:
    return trial.reward if trial.reward is not None else 0.0


def mean_pass_at_k(trials: list[TrialResult], max_k: int) -> dict[int, float] | None:
    """pass@k for k = 1..max_k averaged over tasks, or None when some reward is not exactly 0 or 1."""
    if not trials or any(_reward(t) not in (0.0, 1.0) for t in trials):
        return None
    per_task: dict[str, list[float]] = defaultdict(list)
    for trial in trials:
        per_task[trial.task_name].append(_reward(trial))
    result: dict[int, float] = {}
    for k in range(1, max_k + 1):
        values = [pass_at_k(len(r), int(sum(r)), k) for r in per_task.values() if len(r) >= k]
        if values:
            result[k] = sum(values) / len(values)
    return result or None


def _key_mean(trials: list[TrialResult], key: str) -> float:
    rewarded = {t.task_name for t in trials if t.rewards}
    with_key = {t.task_name for t in trials if key in (t.rewards or {})}
    values = [
        (t.rewards or {}).get(key, 0.0)
        for t in trials
        if t.task_name in with_key or t.task_name not in rewarded
    ]
    return sum(values) / len(values) if values else 0.0


def _timing(trials: list[TrialResult]) -> dict[str, TimingStats]:
    out: dict[str, TimingStats] = {}
    for phase in (*PHASES, "total"):
        values = [v for t in trials if (v := getattr(t.timing, phase)) is not None]
        if values:
            out[phase] = TimingStats(
                mean=statistics.fmean(values), p50=statistics.median(values), max=max(values), n=len(values)
            )
    return out


def wall_time(trials: list[TrialResult]) -> float:
    """Seconds during which at least one of `trials` was running (the union of their start-finish spans), so
    the hours a job lay dead between a kill and its resume are not counted."""
    spans = sorted(
        (datetime.fromisoformat(t.started_at), datetime.fromisoformat(t.finished_at))
        for t in trials
        if t.finished_at
    )
    total, end = 0.0, None
    for start, finish in spans:
        if end is not None and start < end:
            start = end
        if finish > start:
            total += (finish - start).total_seconds()
        end = finish if end is None else max(end, finish)
    return total


def total_usage(trials: list[TrialResult]) -> Usage:
    """The summed tokens and cost of `trials` (as `Usage` + `Usage` sums them, without a model per step:
    the job's result.json is rewritten with it while trials finish)."""
    prompt = completion = cached = 0
    cost: float | None = 0.0
    for trial in trials:
        usage = trial.usage
        prompt += usage.prompt_tokens
        completion += usage.completion_tokens
        cached += usage.cached_tokens
        cost = add_costs(cost, usage.cost_usd)
    return Usage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached, cost_usd=cost)


def with_findings(trials: list[TrialResult]) -> int:
    """How many of `trials` have at least one integrity finding."""
    return sum(1 for t in trials if t.integrity)


def findings_by_kind(trials: list[TrialResult]) -> dict[str, int]:
    """Per integrity finding kind, how many of `trials` have at least one finding of it (sorted by kind)."""
    kinds: dict[str, int] = defaultdict(int)
    for trial in trials:
        for kind in {finding.kind.value for finding in trial.integrity}:
            kinds[kind] += 1
    return dict(sorted(kinds.items()))


def group_metrics(
    agent: str, model: str | None, dataset: str, trials: list[TrialResult], n_attempts: int
) -> GroupMetrics:
    """The metrics of one (agent, model, dataset) group."""
    counted = scored(trials)
    errors: dict[str, int] = defaultdict(int)
    for trial in trials:
        if trial.cause is not None:
            errors[trial.cause.value] += 1
    keys = sorted({key for t in counted for key in (t.rewards or {})})
    n = len(counted)
    return GroupMetrics(
        agent=agent,
        model=model,
        dataset=dataset,
        n_trials=len(trials),
        n_errors=sum(errors.values()),
        errors_by_cause=dict(sorted(errors.items())),
        mean_reward=sum(_reward(t) for t in counted) / n if n else 0.0,
        reward_means={key: _key_mean(counted, key) for key in keys},
        pass_at_k=mean_pass_at_k(counted, n_attempts),
        timing=_timing(trials),
        usage=total_usage(trials),
        wall_time_sec=wall_time(trials),
        n_with_findings=with_findings(trials),
        findings_by_kind=findings_by_kind(trials),
    )


def compute_metrics(trials: list[TrialResult], n_attempts: int) -> list[GroupMetrics]:
    """Metrics for every (agent, model, dataset) group among `trials`, in order of first appearance."""
    groups: dict[tuple[str, str | None, str], list[TrialResult]] = {}
    for trial in trials:
        groups.setdefault((trial.agent, trial.model, trial.dataset), []).append(trial)
    return [group_metrics(a, m, d, group, n_attempts) for (a, m, d), group in groups.items()]


def job_result(
    trials: list[TrialResult],
    *,
    job_name: str,
    job_dir: str,
    started_at: str,
    n_planned: int,
    n_attempts: int,
) -> JobResult:
    """A job's `JobResult` computed from its trials: the one source for what `evsys run` writes to result.json
    and what `evsys jobs show` (and --json) recomputes from the trials' files. Its wall time is the union of
    the trials' spans, as each group's is; `finished_at` is left for the caller."""
    counted = scored(trials)
    rewards = [t.reward or 0.0 for t in counted]
    return JobResult(
        job_name=job_name,
        job_dir=job_dir,
        started_at=started_at,
        complete=len(counted) == n_planned,
        n_planned=n_planned,
        n_done=len(trials),
        n_errors=sum(1 for t in trials if t.failure is not None),
        n_cancelled=len(trials) - len(counted),
        n_with_findings=with_findings(trials),
        mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
        usage=total_usage(trials),
        wall_time_sec=wall_time(trials),
        metrics=compute_metrics(trials, n_attempts),
        trials=trials,
    )


def progress_counts(trials: list[TrialResult]) -> dict[str, Any]:
    """Live counts for progress displays: done, errored (failed, cancelled left out), cancelled, and the mean
    reward so far per agent label (`agent` or `agent (model)`), over the scored trials."""
    by_agent: dict[str, list[float]] = defaultdict(list)
    for trial in scored(trials):
        label = f"{trial.agent} ({trial.model})" if trial.model else trial.agent
        by_agent[label].append(trial.reward or 0.0)
    return {
        "done": len(trials),
        "errored": sum(1 for t in trials if t.failure is not None and t.cause != FailureCause.CANCELLED),
        "cancelled": sum(1 for t in trials if t.cause == FailureCause.CANCELLED),
        "mean_reward_by_agent": {label: sum(r) / len(r) for label, r in sorted(by_agent.items())},
    }
