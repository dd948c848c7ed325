"""`evsys tasks check PATH` and `evsys tasks new NAME`: validate and scaffold task directories; `validate` and
`export` for SWE-bench-style rows (evsys.cli.repo_tasks)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from evsys.cli import repo_tasks
from evsys.task.check import CheckReport
from evsys.task.scaffold import DEFAULT_ORG

if TYPE_CHECKING:
    from evsys.task.python import PromptTask, VerifiedTask

tasks_app = typer.Typer(
    no_args_is_help=True, help="Check, scaffold, validate and export tasks (directories, SWE rows)."
)


def _console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False, soft_wrap=True)


@tasks_app.command("check")
def check(
    path: Annotated[
        Path,
        typer.Argument(
            help="A dataset directory, one task directory, a Python dataset (dataset.toml) or a rows file."
        ),
    ],
    oracle: Annotated[
        bool,
        typer.Option(
            "--oracle",
            help="Task directories: a missing solution/solve.sh is an error (the oracle needs it). Python "
            "datasets: each verifier scores the reference answer (expect 1) and an empty one (expect < 1).",
        ),
    ] = False,
    strict: Annotated[
        bool,
        typer.Option("--strict", help="Treat unknown or misspelt task.toml keys and sections as errors."),
    ] = False,
) -> None:
    """List every problem of the tasks under PATH as `file:field: message`.

    Exit codes: 0 every task is fine (warnings allowed), 1 some task has an error (with --strict, an unknown
    key too), 2 PATH holds no task."""
    from evsys.task.check import check_tasks
    from evsys.task.harbor_dataset import DatasetManifestError
    from evsys.task.loader import DatasetNotFoundError

    out = _console()
    try:
        if _check_rows_or_python(path, out, oracle):
            return
        report = check_tasks(path, require_solution=oracle, strict=strict)
    except (DatasetNotFoundError, DatasetManifestError) as exc:
        _console(stderr=True).print(f"[red]error:[/red] {_escape(str(exc))}")
        raise typer.Exit(2) from None
    for severity, line in report.lines():
        style = "red" if severity == "error" else "yellow"
        out.print(f"[{style}]{_escape(line)}[/{style}]")
    for line in _base_notes(report):
        out.print(f"[dim]{_escape(line)}[/dim]")
    bad = sum(not t.ok for t in report.tasks)
    summary = (
        f"{len(report.tasks)} task(s) checked: {len(report.tasks) - bad} ok, {bad} with errors; "
        f"{report.n_errors} error(s), {report.n_warnings} warning(s)"
    )
    _conclude(out, summary, bad)


def _conclude(out: Console, summary: str, bad: int) -> None:
    """Print the summary (red when something is `bad`) and exit 1 when something is."""
    out.print(f"[{'red' if bad else 'green'}]{summary}[/]")
    if bad:
        raise typer.Exit(1)


HOST_NOTE = "runs on the local backend on {}: the host's /usr{}; other backends run the image"
PYTHON_LAYER_NOTE = (
    ", python and pip in a /usr/local of the sandbox's own (pip installs there as in the image; the host's "
    "Debian python packages import too)"
)


def _base_notes(report: CheckReport) -> list[str]:
    """One note per task that declares a base: what the local backend runs it on where the host provides it;
    else that the base is pulled, and what evsys synthesises in its place where it cannot be (and how that
    differs from the official image)."""
    from evsys.images import ImageRefError, parse_ref, synthesis_plan
    from evsys.task.hostbase import host_stand_in

    notes = []
    for task in report.tasks:
        if task.base_image is None:
            continue
        if task.base_reason is None:
            stand_in = None if task.needs_image else host_stand_in(task.base_image)
            if stand_in is not None:
                layer = PYTHON_LAYER_NOTE if stand_in.python_layer else ""
                notes.append(f"{task.path}: note: {task.base_image} {HOST_NOTE.format(stand_in.name, layer)}")
            continue
        try:
            plan = synthesis_plan(parse_ref(task.base_image))
        except ImageRefError:
            plan = None
        fallback = f"where it cannot be pulled, evsys synthesises it: {plan.describe()}" if plan else ""
        where, _, reason = task.base_reason.partition(": ")
        notes.append(f"{task.path / where}: note: {reason}" + (f"; {fallback}" if fallback else ""))
    return notes


def _check_rows_or_python(path: Path, out: Console, oracle: bool) -> bool:
    """Check a rows file (SWE-bench style) or a Python dataset as `evsys run` would load it (with `oracle`,
    its verifiers against the reference answers); False when `path` is neither (a task directory or a
    dataset of them). Exits 1 when something is invalid."""
    from evsys.repo.rows import RepoRowsError, is_repo_dataset, load_repo_rows
    from evsys.task.python import is_python_dataset

    if is_repo_dataset(path):
        try:
            rows = load_repo_rows(path)
        except RepoRowsError as exc:
            _console(stderr=True).print(f"[red]error:[/red] {_escape(str(exc))}")
            raise typer.Exit(2) from None
        for error in rows.errors:
            out.print(f"[red]{_escape(str(error))}[/red]")
        total = len(rows.tasks) + len(rows.errors)
        summary = f"{total} row(s) checked: {len(rows.tasks)} ok, {len(rows.errors)} with errors"
        out.print(f"[{'red' if rows.errors else 'green'}]{summary}[/]")
        if rows.errors:
            raise typer.Exit(1)
        return True
    if is_python_dataset(path):
        _check_python_dataset(path, out, oracle)
        return True
    return False


def _check_python_dataset(path: Path, out: Console, oracle: bool) -> None:
    """Load a Python dataset (its name, version and description shown); with `oracle`, check every
    verifier against its task's reference answer and an empty answer. Exits 1 on a problem."""
    from evsys.cli.checks import import_from_current_directory
    from evsys.task.python import PythonTaskLoadError, load_python_tasks, read_dataset_config

    import_from_current_directory()  # verifiers named as my_pkg.module:function, as `evsys run` does
    try:
        tasks = load_python_tasks(path)
    except PythonTaskLoadError as exc:
        out.print(f"[red]{_escape(str(exc))}[/red]")
        out.print("[red]the Python dataset does not load[/]")
        raise typer.Exit(1) from None
    manifest = read_dataset_config(path)
    label = (manifest.name or path.name) + (f" {manifest.version}" if manifest.version else "")
    out.print(f"[green]{len(tasks)} Python task(s) loaded from {_escape(str(path))}[/] ({_escape(label)})")
    if manifest.description:
        out.print(_escape(manifest.description))
    if oracle:
        _check_references(tasks, out)


def _check_references(tasks: list[VerifiedTask | PromptTask], out: Console) -> None:
    """Each verifier on its reference answer (expect 1) and on an empty answer (expect < 1)."""
    import asyncio

    from evsys.verify.reference_check import check_reference_answers

    checks = asyncio.run(check_reference_answers(tasks))
    for check in checks:
        for problem in check.problems:
            out.print(f"[red]{_escape(check.task_id)}: {_escape(problem)}[/red]")
    bad = sum(not check.ok for check in checks)
    summary = (
        f"{len(checks)} verifier(s) checked against their reference answers: {len(checks) - bad} ok, "
        f"{bad} with problems"
    )
    _conclude(out, summary, bad)


tasks_app.command("validate")(repo_tasks.validate)
tasks_app.command("export")(repo_tasks.export)


@tasks_app.command("new")
def new(
    name: Annotated[
        str, typer.Argument(help="ORG/NAME or NAME: the task's name (NAME is also the directory name).")
    ],
    directory: Annotated[
        Path, typer.Option("--dir", "-d", help="Where to create the task directory.")
    ] = Path("."),
    org: Annotated[
        str, typer.Option("--org", help="The org of a NAME given without one (Harbor names tasks ORG/NAME).")
    ] = DEFAULT_ORG,
) -> None:
    """Scaffold a task directory NAME that `evsys tasks check` accepts, the oracle solves and Harbor loads."""
    from evsys.task.scaffold import ScaffoldError, scaffold_task

    try:
        task_dir = scaffold_task(name, directory, org=org)
    except ScaffoldError as exc:
        _console(stderr=True).print(f"[red]error:[/red] {_escape(str(exc))}")
        raise typer.Exit(2) from None
    out = _console()
    out.print(f"created {_escape(str(task_dir))}/")
    for relative in (
        "instruction.md",
        "task.toml",
        "environment/Dockerfile",
        "tests/test.sh",
        "solution/solve.sh",
    ):
        out.print(f"  {relative}")
    out.print(
        f"next: edit the files, then `evsys tasks check {task_dir}` and `evsys run {task_dir} -a oracle`"
    )


def _escape(text: str) -> str:
    """Keep rich from reading `[...]` in user text as markup."""
    from rich.markup import escape

    return escape(text)
