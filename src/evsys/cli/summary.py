"""The summary `evsys run` (and `evsys jobs show`) prints after a job: per (agent, model, dataset) metrics,
reward per task, where failed trials' tracebacks are, and the job directory."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from evsys.cli.markup import shown

if TYPE_CHECKING:
    from evsys.records import GroupMetrics, JobResult, TrialResult

MAX_TASK_ROWS = 40
MAX_TRACEBACK_LINES = 5


def stdout_console() -> Console:
    """stdout; wide enough for the summary table when it is not a terminal (logs, CI, pipes)."""
    out = Console()
    return out if out.is_terminal else Console(width=200)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_task_table(out: Console, result: JobResult) -> None:
    """Reward per task and agent (mean over attempts) with failure causes; skipped for large datasets."""
    from rich.table import Table

    from evsys.engine.metrics import scored

    cells: dict[str, dict[str, list[TrialResult]]] = {}
    for trial in result.trials:
        cells.setdefault(trial.task_name, {}).setdefault(trial.agent, []).append(trial)
    if not cells or len(cells) > MAX_TASK_ROWS:
        return
    agents = sorted({trial.agent for trial in result.trials})
    table = Table(title="reward per task (mean over attempts)", title_justify="left")
    table.add_column("task")
    for name in agents:
        table.add_column(shown(name), overflow="fold")
    for task_name in sorted(cells):
        row = [shown(task_name)]
        for name in agents:
            trials = cells[task_name].get(name, [])
            rewards = [t.reward or 0.0 for t in scored(trials)]  # the summary's rule: cancelled left out
            causes = sorted({t.failure.cause.value for t in trials if t.failure is not None})
            text = _fmt(sum(rewards) / len(rewards)) if rewards else "-"
            text = f"{text} ({', '.join(causes)})" if causes else text
            tests = [t.tests_summary for t in trials if t.tests_summary]
            row.append(shown(f"{text}: {tests[0]}" if len(trials) == 1 and tests else text))
        table.add_row(*row)
    out.print(table)


def _print_tracebacks(out: Console, result: JobResult, job_dir: Path | str) -> None:
    """Where the tracebacks of failed trials are (never printed themselves)."""
    files = [f"{job_dir}/{t.trial_name}/{t.exception_file}" for t in result.trials if t.exception_file]
    if not files:
        return
    out.print(f"{len(files)} trial(s) raised an exception; tracebacks in:", highlight=False)
    for path in files[:MAX_TRACEBACK_LINES]:
        out.print(f"  {shown(path)}", highlight=False, soft_wrap=True)
    if len(files) > MAX_TRACEBACK_LINES:
        out.print(
            f"  ... and {len(files) - MAX_TRACEBACK_LINES} more (evsys jobs show {job_dir})", highlight=False
        )


def _findings(group: GroupMetrics) -> str:
    """The trials with integrity findings: how many, and how many per kind."""
    if not group.n_with_findings:
        return "0"
    kinds = ", ".join(f"{kind} {n}" for kind, n in group.findings_by_kind.items())
    return f"{group.n_with_findings} ({kinds})"


def print_summary(out: Console, result: JobResult, job_dir: Path | str) -> None:
    """The summary table per (agent, model, dataset), then the job directory."""
    from rich.table import Table

    table = Table(title=f"job {shown(result.job_name)}", title_justify="left")
    for column in ("agent", "model", "dataset", "trials", "errors", "findings", "mean reward", "per key"):
        table.add_column(column, overflow="fold")
    table.add_column("pass@k", overflow="fold")
    for column in ("tokens in/out", "cost $", "wall s"):
        table.add_column(column, justify="right")
    for group in result.metrics:
        errors = ", ".join(f"{cause} {n}" for cause, n in group.errors_by_cause.items()) or "0"
        keys = ", ".join(f"{k} {_fmt(v)}" for k, v in group.reward_means.items() if k != "reward") or "-"
        passk = ", ".join(f"@{k} {_fmt(v)}" for k, v in (group.pass_at_k or {}).items()) or "-"
        table.add_row(
            shown(group.agent),
            shown(group.model or "-"),
            shown(group.dataset),
            str(group.n_trials),
            shown(errors),
            _findings(group),
            _fmt(group.mean_reward),
            shown(keys),
            passk,
            f"{group.usage.prompt_tokens}/{group.usage.completion_tokens}",
            "unknown" if group.usage.cost_usd is None else _fmt(group.usage.cost_usd, 4),
            _fmt(group.wall_time_sec, 1),
        )
    out.print(table)
    for group in result.metrics:
        generated = group.usage.completion_tokens
        if generated and group.wall_time_sec > 0:
            out.print(
                f"{shown(group.agent)} ({shown(group.model)}): {generated} tokens generated in "
                f"{group.wall_time_sec:.1f} s"
                f" = {generated / group.wall_time_sec:.1f} tokens/s",
                highlight=False,
            )
    print_task_table(out, result)
    reused = sum(1 for t in result.trials if t.sandbox_reused)
    if reused:
        out.print(
            f"sandboxes: {reused} of {len(result.trials)} trials ran in a sandbox reset after an earlier "
            "trial (--fresh-sandboxes to start one per trial)",
            highlight=False,
        )
    _print_tracebacks(out, result, job_dir)
    missing = result.n_planned - result.n_done
    if missing:
        out.print(f"{missing} of {result.n_planned} planned trials did not run", highlight=False)
    out.print(f"job directory: {shown(job_dir)}", highlight=False, soft_wrap=True, emoji=False)
