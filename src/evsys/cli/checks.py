"""What `evsys run` checks and decides before a job starts: pre-flight, what a resume may change, where a
traceback goes. Errors are one `error:` line on stderr and exit code 2; nothing is written."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from evsys.cli.markup import shown

if TYPE_CHECKING:
    from evsys.cli.executor_flags import ExecutorFlags
    from evsys.engine.config import JobConfig
    from evsys.engine.job import Job
    from evsys.engine.preflight import PreflightReport

EXIT_USAGE = 2

console = Console(stderr=True)


def fail(message: str) -> typer.Exit:
    """Print `error: message` on stderr; the Exit (code 2) to raise."""
    console.print(f"[bold red]error:[/] {shown(message)}", highlight=False, soft_wrap=True, emoji=False)
    return typer.Exit(EXIT_USAGE)


def require_writable(directory: Path, given: str) -> None:
    """A usage error (exit 2, one line starting with `given`, the flag and its value) unless a file can be
    created in `directory` (or, while it does not exist yet, in its nearest existing parent). It creates and
    removes a file there: root ignores permission bits, not a read-only mount."""
    import tempfile

    place = directory
    while not place.exists() and place.parent != place:
        place = place.parent
    if not place.is_dir():
        raise fail(f"{given}: {place} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".evsys-write-check-", dir=place)
    except OSError as exc:
        raise fail(f"{given}: cannot write in {place} ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)


def filesystem_error(exc: OSError) -> typer.Exit:
    """One `error:` line (exit 2) for a file that could not be read or written, instead of a traceback."""
    where = f"{exc.filename} -> {exc.filename2}" if exc.filename2 else str(exc.filename)
    return fail(f"{where}: {exc.strerror or exc}")


class OneLineErrors(typer.Typer):
    """The `evsys` app: a file that cannot be read or written (an OSError naming it) is one `error:` line and
    exit code 2 from every command, never a traceback."""

    def __call__(self, *args: object, **kwargs: object) -> object:
        try:
            return super().__call__(*args, **kwargs)
        except OSError as exc:
            if exc.filename is None:
                raise
            raise SystemExit(filesystem_error(exc).exit_code) from None


def import_from_current_directory() -> None:
    """Make `-a my_pkg.agents:MyAgent` importable from the current directory, as `python -m` would (the
    installed `evsys` script puts only its own directory on sys.path)."""
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)


def resume_job(
    ctx: typer.Context,
    resume: Path,
    paths: list[Path],
    retry_errors: bool,
    settings: dict[str, Any],
    executor: ExecutorFlags | None = None,
) -> Job:
    """The job to resume, with the flags that may change applied; a usage error naming any other flag. It
    runs on the executor its config.json records unless `executor` names one or changes its settings."""
    from evsys.cli.executor_flags import executor_spec
    from evsys.engine import Job, JobStoreError
    from evsys.engine.config import RESUME_SAFE_FIELDS
    from evsys.engine.store import JobStore

    if paths:
        raise fail("--resume takes no task paths: the job's saved config.json says what to run")
    given = flags_given(ctx)
    refused = [flag for name, flag in given.items() if name not in (*RESUME_SAFE_FIELDS, *RESUME_FLAGS)]
    if refused:
        safe = ", ".join(flag for name, flag in all_flags(ctx).items() if name in RESUME_SAFE_FIELDS)
        raise fail(
            f"{', '.join(refused)} cannot change when resuming {resume} (its config.json says what runs); "
            f"a resume may change only {safe}"
        )
    changes = {name: settings[name] for name in given if name in RESUME_SAFE_FIELDS and name in settings}
    try:
        if executor is not None and (executor.name is not None or executor.options):
            recorded = JobStore(resume).read_config().executor
            changes["executor"] = executor_spec(executor.name, executor.options, recorded)
        return Job.resume(resume, retry_errors=retry_errors, changes=changes)
    except JobStoreError as exc:
        raise fail(str(exc)) from None


RESUME_FLAGS = (
    "resume",
    "retry_errors",
    "stream",
    "model_probe",
    "strict",
    "paths",
    "executor",
    "ray_address",
    "ray_mode",
    "workers",
    "progress_interval",
    "agent_env",
    "env_file",
)
"""The `run` parameters that belong to a resume itself or to where it runs (task paths are refused on their
own); a job started locally may resume on a Ray cluster and the other way round."""


def all_flags(ctx: typer.Context) -> dict[str, str]:
    return {p.name: "/".join(p.opts) for p in ctx.command.params if p.name}


def flags_given(ctx: typer.Context) -> dict[str, str]:
    """The parameters set on the command line (or from the environment), name -> flag text."""
    given = {}
    for name, flag in all_flags(ctx).items():
        source = ctx.get_parameter_source(name)  # an enum of the click typer ships (not importable as click)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            given[name] = flag
    return given


def run_preflight(config: JobConfig, *, probe: bool, strict: bool) -> PreflightReport:
    """Stop with exit 2 and one line per problem before anything is written; print what is only a warning;
    the report (with the task directories it loaded, for the job to plan from)."""
    from evsys.engine.preflight import PreflightError, preflight

    try:
        report = preflight(config, probe_models=probe, strict=strict)
    except PreflightError as exc:
        for problem in exc.problems:
            message = f"[bold red]error:[/] {shown(problem)}"
            console.print(message, highlight=False, soft_wrap=True, emoji=False)
        raise typer.Exit(EXIT_USAGE) from None
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/] {shown(warning)}", highlight=False, soft_wrap=True, emoji=False)
    if report.invalid_tasks:
        console.print(
            f"[yellow]warning:[/] {len(report.invalid_tasks)} invalid task(s) will fail as task_invalid "
            "(--strict refuses to start instead):",
            highlight=False,
        )
        for line in report.invalid_tasks:
            console.print(f"  {shown(line)}", highlight=False, soft_wrap=True, emoji=False)
    return report


def save_traceback(exc: Exception, job_dir: Path) -> Path:
    """Write `exc`'s traceback to the job's exception.txt (a temp file when the job has no directory or it
    cannot be written)."""
    import tempfile
    import traceback

    text = "".join(traceback.format_exception(exc))
    if job_dir.is_dir():
        path = job_dir / "exception.txt"
        try:
            path.write_text(text)
            return path
        except OSError:
            pass
    with tempfile.NamedTemporaryFile("w", prefix="evsys-exception-", suffix=".txt", delete=False) as f:
        f.write(text)
    return Path(f.name)
