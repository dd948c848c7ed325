"""`evsys jobs list|show|diff`: what jobs ran, how one went, and how two compare, in the terminal."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from evsys.cli.checks import require_writable
from evsys.cli.complete import complete_job_dir
from evsys.cli.markup import shown

if TYPE_CHECKING:
    from evsys.viewer.jobdata import ErrorGroup, LoadedJob

jobs_app = typer.Typer(no_args_is_help=True, help="List, summarise and compare job directories.")

EXIT_USAGE = 2


def _out() -> Console:
    out = Console(highlight=False)
    return out if out.is_terminal else Console(width=200, highlight=False)


def _fail(message: str) -> typer.Exit:
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {shown(message)}")
    return typer.Exit(EXIT_USAGE)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _load(path: Path) -> LoadedJob:
    from evsys.viewer.jobdata import is_job_dir, load_job

    if not is_job_dir(path):
        raise _fail(f"{path} is not a job directory (no config.json in it)")
    return load_job(path)


@jobs_app.command("list", short_help="Every job: when, state, agents, models, trials, mean, pass@k (--json).")
def list_jobs(
    jobs_dir: Annotated[
        Path,
        typer.Argument(
            help="The directory holding job directories.", show_default=True, autocompletion=complete_job_dir
        ),
    ] = Path("jobs"),
    as_json: Annotated[bool, typer.Option("--json", help="Print {'jobs': [...]} as JSON instead.")] = False,
) -> None:
    """Every job under JOBS_DIR, newest first: when, state, agents, models, trials, mean, pass@k, errors."""
    from evsys.viewer.jobdata import list_jobs as read_jobs

    if not jobs_dir.is_dir():
        raise _fail(f"{jobs_dir} is not a directory")
    listings = read_jobs(jobs_dir)
    if as_json:
        _print_json({"jobs": [job.model_dump(mode="json") for job in listings]})
        return
    out = _out()
    if not listings:
        out.print(f"no jobs in {jobs_dir}")
        return
    table = Table(title=f"jobs in {jobs_dir}", title_justify="left")
    for column in ("job", "started", "state", "agents", "models", "trials", "mean", "pass@k", "errors"):
        table.add_column(column, overflow="fold")
    for job in listings:
        trials = str(job.n_trials)
        if job.n_planned and job.n_planned != job.n_trials:
            trials = f"{job.n_trials}/{job.n_planned}"
        passk = ", ".join(f"@{k} {v:.3f}" for k, v in (job.pass_at_k or {}).items()) or "-"
        table.add_row(
            shown(job.name),
            (job.started_at or "-")[:19].replace("T", " "),
            job.state,
            shown(", ".join(job.agents)),
            shown(", ".join(job.models) or "-"),
            trials,
            _fmt(job.mean_reward),
            passk,
            str(job.n_errors) if not job.problem else f"{job.n_errors} ({shown(job.problem)})",
        )
    out.print(table)


@jobs_app.command(
    "show", short_help="A job's summary, errors by message, failed trials, integrity findings (--json)."
)
def show(
    job_dir: Annotated[
        Path, typer.Argument(help="A job directory (jobs/<name>).", autocompletion=complete_job_dir)
    ],
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the summary, metrics, error groups, failed trials and trials with findings as JSON.",
        ),
    ] = False,
) -> None:
    """The job's summary as `evsys run` printed it, its errors grouped by cause and message, every failed
    trial with its cause and first error, then every trial with integrity findings (kinds and evidence)."""
    from evsys.cli.summary import print_summary
    from evsys.viewer.jobdata import error_summary, first_line

    job = _load(job_dir)
    failed = [t for t in job.trials if t.failure is not None]
    groups = error_summary(job.trials)
    if as_json:
        _print_json(_job_json(job, groups))
        return
    out = _out()
    print_summary(out, job.as_job_result(), job_dir)
    if groups:
        _print_error_groups(out, groups)
    if failed:
        table = Table(title=f"failed trials ({len(failed)})", title_justify="left")
        for column in ("trial", "cause", "reward", "first error line"):
            table.add_column(column, overflow="fold")
        for trial in failed:
            assert trial.failure is not None
            line = first_line(trial.failure.message)
            if (job_dir / trial.trial_name / "exception.txt").is_file():
                line += f" (traceback: {trial.trial_name}/exception.txt)"
            cause = trial.failure.cause.value
            table.add_row(shown(trial.trial_name), cause, _fmt(trial.reward), shown(line))
        out.print(table)
    _print_findings(out, job)
    for pending in job.pending:
        out.print(f"no result: {shown(pending.name)}: {shown(pending.problem)}")
    for problem in (job.config_error, job.result_error):
        if problem:
            out.print(f"[yellow]{shown(problem)}[/]")


def _print_json(data: object) -> None:
    import json

    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


def _job_json(job: LoadedJob, groups: list[ErrorGroup]) -> dict[str, Any]:
    """`jobs show --json`: the job's summary and metrics, errors grouped by message, failed and pending
    trials."""
    from evsys.viewer.jobdata import first_line

    summary = job.as_job_result().model_dump(mode="json", exclude={"trials"})
    failed = [
        {
            "trial": t.trial_name,
            "task": t.task_name,
            "agent": t.agent,
            "cause": t.failure.cause.value,
            "reward": t.reward,
            "first_error_line": first_line(t.failure.message),
        }
        for t in job.trials
        if t.failure is not None
    ]
    return {
        "state": job.state,
        **summary,
        "errors": [group.model_dump() for group in groups],
        "failed_trials": failed,
        "integrity_trials": [
            {
                "trial": t.trial_name,
                "task": t.task_name,
                "agent": t.agent,
                "reward": t.reward,
                "cause": t.cause.value if t.cause else None,
                "findings": [f.model_dump(mode="json") for f in t.integrity],
            }
            for t in job.trials
            if t.integrity
        ],
        "pending": [p.model_dump() for p in job.pending],
        "config_error": job.config_error,
        "result_error": job.result_error,
    }


def _print_findings(out: Console, job: LoadedJob) -> None:
    """Every trial with integrity findings: its reward, outcome, and each finding's kind and evidence."""
    from evsys.viewer.jobdata import first_line

    flagged = [t for t in job.trials if t.integrity]
    if not flagged:
        return
    table = Table(title=f"trials with integrity findings ({len(flagged)})", title_justify="left")
    for column in ("trial", "reward", "outcome", "findings (kind: evidence)"):
        table.add_column(column, overflow="fold")
    for trial in flagged:
        lines = [f"{f.kind.value}: {first_line(f.evidence)}" for f in trial.integrity]
        outcome = trial.cause.value if trial.cause else "ok"
        table.add_row(shown(trial.trial_name), _fmt(trial.reward), outcome, shown("\n".join(lines)))
    out.print(table)


def _print_error_groups(out: Console, groups: list[ErrorGroup]) -> None:
    table = Table(title="errors by message", title_justify="left")
    for column in ("count", "cause", "message", "trials"):
        table.add_column(column, overflow="fold")
    for group in groups:
        more = f" (+{group.count - len(group.trials)})" if group.count > len(group.trials) else ""
        names = ", ".join(group.trials) + more
        table.add_row(str(group.count), group.cause, shown(group.message), shown(names))
    out.print(table)


@jobs_app.command("config", short_help="A job file to rerun a job with `evsys run -c`.")
def config(
    job_dir: Annotated[
        Path, typer.Argument(help="A job directory (jobs/<name>).", autocompletion=complete_job_dir)
    ],
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the YAML here (default: print it).")
    ] = None,
) -> None:
    """The job's config.json as a YAML job file, without its job name (a rerun gets a new directory):
    `evsys jobs config jobs/<name> -o job.yaml`, then `evsys run -c job.yaml`."""
    import json

    from evsys.cli.job_file import job_file_text
    from evsys.util.atomic import write_text_atomic

    _load(job_dir)  # a job directory, or a usage error
    try:
        text = job_file_text(json.loads((job_dir / "config.json").read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise _fail(f"cannot read {job_dir / 'config.json'}: {exc}") from None
    if output is None:
        typer.echo(text, nl=False)
        return
    require_writable(output.parent, f"-o {output}")
    write_text_atomic(output, text)
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"wrote {shown(str(output))}; rerun with `evsys run -c {shown(str(output))}`"
    )


@jobs_app.command("diff", short_help="Per-task reward changes between two jobs.")
def diff(
    job_a: Annotated[
        Path, typer.Argument(help="The job to compare from (jobs/<a>).", autocompletion=complete_job_dir)
    ],
    job_b: Annotated[
        Path, typer.Argument(help="The job to compare to (jobs/<b>).", autocompletion=complete_job_dir)
    ],
    changed_only: Annotated[
        bool, typer.Option("--changed", help="Show only tasks whose reward changed.")
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print {'a', 'b', 'tasks': [{task, agent, model, a, b, delta, ...}]}."),
    ] = False,
) -> None:
    """Per-task mean reward in both jobs and the change (B - A), per agent and model."""
    from evsys.viewer.jobdata import diff_jobs

    a, b = _load(job_a), _load(job_b)
    rows = diff_jobs(a, b)
    if changed_only:
        rows = [r for r in rows if r.delta is None or abs(r.delta) > 1e-9]
    if as_json:
        _print_json({"a": a.name, "b": b.name, "tasks": [row.model_dump(mode="json") for row in rows]})
        return
    table = Table(title=f"reward per task: {a.name} -> {b.name}", title_justify="left")
    for column in ("task", "agent", "model", a.name, b.name, "delta"):
        table.add_column(shown(column), overflow="fold")
    for row in rows:
        delta = "-" if row.delta is None else f"{row.delta:+.3f}"
        style = "green" if (row.delta or 0) > 1e-9 else "red" if (row.delta or 0) < -1e-9 else ""
        table.add_row(
            shown(row.task), shown(row.agent), shown(row.model or "-"),
            f"{_fmt(row.a)} ({row.n_a})", f"{_fmt(row.b)} ({row.n_b})",
            f"[{style}]{delta}[/]" if style else delta,
        )  # fmt: skip
    out = _out()
    out.print(table)
    both = [r.delta for r in rows if r.delta is not None]
    up = sum(1 for change in both if change > 1e-9)
    down = sum(1 for change in both if change < -1e-9)
    out.print(f"{len(both)} in both: {up} better, {down} worse, {len(both) - up - down} unchanged")
