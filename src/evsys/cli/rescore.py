"""`evsys rescore JOB [--tests DIR]`: the verifier run again on each trial's kept final filesystem
(evsys.engine.rescore), the new rewards written beside the old and shown next to them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from evsys.cli.complete import complete_job_dir
from evsys.cli.markup import shown


def _reward(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def rescore(
    job_dir: Annotated[
        Path, typer.Argument(help="A job directory run with --keep-state.", autocompletion=complete_job_dir)
    ],
    tests: Annotated[
        Path | None,
        typer.Option(
            "--tests",
            help="Corrected tests to run instead of each task's (a directory laid out like tests/).",
        ),
    ] = None,
    n_concurrent: Annotated[
        int | None,
        typer.Option("-n", "--n-concurrent", min=1, help="Trials rescored at once (default: the job's)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
) -> None:
    """Re-run the verifier on each trial's kept state in a fresh sandbox; new results go to
    <trial>/rescore/<time>/, never over the trial's own."""
    from evsys.engine.rescore import rescore_job
    from evsys.engine.store import JobStoreError

    err = Console(stderr=True, highlight=False, soft_wrap=True)
    if tests is not None and not (tests / "test.sh").is_file():
        err.print(
            f"[bold red]error:[/] --tests {shown(str(tests))}: no test.sh there (lay it out like tests/)"
        )
        raise typer.Exit(2)
    try:
        rows = asyncio.run(rescore_job(job_dir, tests.resolve() if tests else None, concurrency=n_concurrent))
    except (JobStoreError, OSError) as exc:
        err.print(f"[bold red]error:[/] {shown(str(exc))}")
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps([row.model_dump(mode="json") for row in rows], indent=2))
        return
    table = Table(title=f"rescore of {shown(job_dir.name)}")
    for column in ("trial", "old reward", "new reward", "note"):
        table.add_column(column)
    for row in rows:
        written = f"{row.result_dir.parent.name}/{row.result_dir.name}" if row.result_dir else ""
        note = row.skipped or row.new_failure or written
        table.add_row(shown(row.trial_name), _reward(row.old_reward), _reward(row.new_reward), shown(note))
    Console(highlight=False).print(table)
    if not any(row.result_dir for row in rows):
        err.print("[yellow]no trial kept its state: run the job with `evsys run --keep-state`[/]")
