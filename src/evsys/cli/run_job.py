"""Running a prepared job from the CLI: Ctrl-C/SIGTERM cancel it (a second press exits at once), the live
progress shows while it runs, and failures become one line (a bug's traceback goes to a file)."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import TYPE_CHECKING

import typer

from evsys.cli.checks import console, save_traceback
from evsys.cli.checks import fail as _fail
from evsys.cli.markup import shown
from evsys.cli.progress import DEFAULT_INTERVAL, live_progress

if TYPE_CHECKING:
    from evsys.engine.job import Job
    from evsys.records import JobResult

EXIT_CANCELLED = 130


def run_job(job: Job, progress_interval: float = DEFAULT_INTERVAL) -> JobResult:
    """Run `job` to its end (or its cancellation) with live progress; usage errors exit with code 2, a bug in
    evsys or a plugin with code 1 (its traceback saved in the job directory)."""
    from evsys.engine import JobStoreError, PlanError
    from evsys.task.loader import DatasetNotFoundError

    try:
        return asyncio.run(_run_with_signals(job, progress_interval))
    except (JobStoreError, PlanError, DatasetNotFoundError) as exc:
        raise _fail(str(exc)) from None
    except ValueError as exc:  # unknown agent, bad agent kwargs
        raise _fail(str(exc)) from None
    except Exception as exc:  # a bug in evsys or a plugin: one line here, the traceback in a file
        path = save_traceback(exc, job.job_dir)
        console.print(
            f"[bold red]error:[/] {type(exc).__name__}: {shown(exc)} (traceback in {shown(path)})",
            highlight=False,
            soft_wrap=True,
            emoji=False,
        )
        raise typer.Exit(1) from None


async def _run_with_signals(job: Job, progress_interval: float) -> JobResult:
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if job.cancelled:
            os._exit(EXIT_CANCELLED)
        console.print("\n[yellow]cancelling: stopping running trials (press Ctrl-C again to exit at once)[/]")
        job.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        async with live_progress(job, console, progress_interval):
            return await job.run()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
