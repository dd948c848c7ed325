"""`evsys export JOB_DIR --format rl|sft|atif|parquet|sequences|openenv -o OUT`: trainer-ready files from a
job directory."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from evsys.cli.complete import (
    complete_advantage,
    complete_export_format,
    complete_integrity,
    complete_job_dir,
)

if TYPE_CHECKING:
    from evsys.trajectory.export import ExportReport


def export(
    job_dir: Annotated[
        Path, typer.Argument(help="A job directory, e.g. jobs/<name>.", autocompletion=complete_job_dir)
    ],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="rl (JSONL) | parquet | sft (chat JSONL) | atif (copies) | sequences | openenv",
            autocompletion=complete_export_format,
        ),
    ] = "rl",
    out: Annotated[Path, typer.Option("-o", "--out", help="Output directory.")] = Path("out"),
    successful_only: Annotated[
        bool, typer.Option("--successful-only", help="SFT: only samples without error and reward >= 1.")
    ] = False,
    advantage: Annotated[
        str,
        typer.Option(
            "--advantage", help="mean | mean_std | leave_one_out", autocompletion=complete_advantage
        ),
    ] = "mean",
    integrity: Annotated[
        str,
        typer.Option(
            "--integrity",
            help="A trial with integrity findings: zero (reward 0) | screen (left out of its group's "
            "advantages, screened=true) | flag (recorded only).",
            autocompletion=complete_integrity,
        ),
    ] = "zero",
) -> None:
    """Export a job: RL rows (tokens, masks, logprobs, rewards, advantages, integrity findings), SFT chats,
    ATIF copies."""
    from evsys.trajectory.advantages import ADVANTAGE_METHODS
    from evsys.trajectory.export import EXPORT_FORMATS, ExportError, export_job_report
    from evsys.trajectory.integrity import INTEGRITY_POLICIES
    from evsys.util.literals import is_one_of

    err = Console(stderr=True, highlight=False, soft_wrap=True)
    if not is_one_of(fmt, EXPORT_FORMATS):
        err.print(f"[red]error:[/red] --format must be one of {', '.join(EXPORT_FORMATS)}, got {fmt!r}")
        raise typer.Exit(2)
    if not is_one_of(advantage, ADVANTAGE_METHODS):
        err.print(f"[red]error:[/red] --advantage must be one of {', '.join(ADVANTAGE_METHODS)}")
        raise typer.Exit(2)
    if integrity not in INTEGRITY_POLICIES:
        err.print(f"[red]error:[/red] --integrity must be one of {', '.join(INTEGRITY_POLICIES)}")
        raise typer.Exit(2)
    try:
        report = export_job_report(
            job_dir, fmt, out, successful_only=successful_only, advantage=advantage, integrity=integrity
        )
    except (ExportError, ImportError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    _print_report(report, fmt, err)


def _print_report(report: ExportReport, fmt: str, err: Console) -> None:
    """How many rows went where; for none, a warning saying why."""
    unit = "trajectory copies" if fmt == "atif" else "row(s)"
    where = report.location
    Console(highlight=False, soft_wrap=True).print(
        f"wrote {report.rows} {unit} from {report.trials} trial(s) to {where}"
    )
    if report.rows == 0:
        err.print(f"[yellow]warning:[/] {where} holds no rows ({report.why_empty})")
