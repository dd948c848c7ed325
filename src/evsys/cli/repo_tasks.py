"""`evsys tasks validate ROWS` and `evsys tasks export ROWS -o DIR`: SWE-bench-style rows (evsys.repo)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from evsys.records import JobResult, TrialResult


def _console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def _fail(message: str) -> typer.Exit:
    _console(stderr=True).print(f"[red]error:[/red] {message}", markup=True)
    return typer.Exit(2)


def _outcome(trial: TrialResult | None) -> tuple[float | None, str]:
    if trial is None:
        return None, "did not run"
    reason = trial.tests_summary or ""
    if trial.failure is not None:
        reason = f"{trial.failure.cause.value}: {trial.failure.message}"
    return trial.reward, reason


def validation_rows(result: JobResult) -> list[tuple[str, bool, float | None, float | None, str]]:
    """Per instance: valid (gold 1.0 and no-op 0.0), the two rewards, and why when it is not valid."""
    by_task: dict[str, dict[str, TrialResult]] = {}
    for trial in result.trials:
        by_task.setdefault(trial.task_name, {})[trial.agent] = trial
    rows = []
    for name in sorted(by_task):
        gold, gold_why = _outcome(by_task[name].get("oracle"))
        nop, nop_why = _outcome(by_task[name].get("nop"))
        valid = gold == 1.0 and nop == 0.0
        reasons = []
        if gold != 1.0:
            reasons.append(f"gold: {gold_why or 'reward ' + str(gold)}")
        if nop != 0.0:
            reasons.append(f"no-op: {nop_why or 'reward ' + str(nop)}")
        rows.append((name, valid, gold, nop, "; ".join(reasons) or gold_why))
    return rows


def validate(
    rows: Annotated[Path, typer.Argument(help="A rows file (.jsonl, .parquet) or a saved HF dataset.")],
    jobs_dir: Annotated[Path, typer.Option("--jobs-dir", help="Where the validation job goes.")] = Path(
        "jobs"
    ),
    n_concurrent: Annotated[int, typer.Option("-n", "--n-concurrent", help="Trials at once.")] = 4,
    sandbox: Annotated[str, typer.Option("--sandbox", help="The sandbox backend.")] = "local",
) -> None:
    """Run the gold patch (oracle) and no change (nop) on every row: valid rows score 1.0 and 0.0; the
    others are listed with the reason (failing tests, a patch that does not apply, a row error)."""
    from evsys.cli.run_job import run_job
    from evsys.engine.config import AgentSpec, JobConfig
    from evsys.engine.job import Job

    config = JobConfig(
        datasets=[rows],
        agents=[AgentSpec(name="oracle"), AgentSpec(name="nop")],
        jobs_dir=jobs_dir,
        n_concurrent=n_concurrent,
        sandbox=sandbox,
    )
    result = run_job(Job(config))
    table = Table(title=f"validation of {rows.name}", title_justify="left")
    for column in ("instance", "valid", "gold", "no-op", "reason"):
        table.add_column(column, overflow="fold")
    lines = validation_rows(result)
    for name, valid, gold, nop, reason in lines:
        shown = [f"{v:.3f}" if v is not None else "-" for v in (gold, nop)]
        table.add_row(escape(name), "[green]yes[/]" if valid else "[red]no[/]", *shown, escape(reason))
    out = _console()
    out.print(table)
    bad = sum(not line[1] for line in lines)
    job_dir = config.jobs_dir / config.job_name
    out.print(f"{len(lines) - bad} of {len(lines)} instance(s) valid; job directory: {escape(str(job_dir))}")
    if bad:
        raise typer.Exit(1)


def export(
    rows: Annotated[Path, typer.Argument(help="A rows file (.jsonl, .parquet) or a saved HF dataset.")],
    out: Annotated[
        Path, typer.Option("-o", "--output", help="The directory to write task directories into.")
    ],
) -> None:
    """Write every valid row as a Harbor task directory (repository tree included) under OUT; bad rows are
    listed and skipped."""
    from evsys.repo.cache import RepoCache, RepoCacheError
    from evsys.repo.materialise import write_task_dir
    from evsys.repo.rows import RepoRowsError, load_repo_rows

    try:
        loaded = load_repo_rows(rows)
    except RepoRowsError as exc:
        raise _fail(str(exc)) from None
    console = _console()
    for error in loaded.errors:
        console.print(f"[red]skipped[/] {escape(str(error))}")
    cache = RepoCache()
    written = 0
    for task in loaded.tasks:
        try:
            path = write_task_dir(task, out / task.instance_id, with_repo=True, cache=cache)
        except RepoCacheError as exc:
            console.print(f"[red]skipped[/] {escape(task.instance_id)}: {escape(str(exc))}")
            continue
        written += 1
        console.print(f"wrote {escape(str(path))}/")
    skipped = len(loaded.tasks) + len(loaded.errors) - written
    console.print(f"{written} task directories written; {skipped} row(s) skipped")
    if skipped:
        raise typer.Exit(1)
