"""The `evsys` command. Each sub-command lives in its own module; heavy imports stay inside the commands."""

from __future__ import annotations

from typing import Annotated

import typer

from evsys.cli.checks import OneLineErrors
from evsys.cli.datasets import datasets_app
from evsys.cli.doctor import doctor
from evsys.cli.export import export
from evsys.cli.harness import harness_app
from evsys.cli.image import image_app
from evsys.cli.jobs import jobs_app
from evsys.cli.model import model_app
from evsys.cli.rescore import rescore
from evsys.cli.run import run
from evsys.cli.serve import serve
from evsys.cli.tasks import tasks_app
from evsys.cli.trial import trial_app
from evsys.cli.trial_files import trial_files
from evsys.cli.view import view

app = OneLineErrors(
    name="evsys",
    help="Run LLM agents on tasks in isolated sandboxes, score them, and get token-exact trajectories back.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)
# short_help: the one-line summaries `evsys --help` lists, whole on an 80-column terminal
app.command("run", short_help="Run agents on tasks and score them (or --resume a job).")(run)
app.command("doctor", short_help="Check bwrap, overlayfs, cgroups, seccomp, user namespaces.")(doctor)
app.command("export", short_help="Export a job: RL rows, SFT chats or ATIF copies.")(export)
app.command("serve", short_help="Serve tasks to OpenEnv trainers (WebSocket, HTTP, MCP).")(serve)
app.command("rescore", short_help="Re-run the verifier on a --keep-state job's kept filesystems.")(rescore)
app.command("view", short_help="Browse jobs and trials in a local web viewer.")(view)
app.add_typer(tasks_app, name="tasks", help="Check, scaffold, validate and export tasks and SWE rows.")
app.add_typer(image_app, name="image", help="Build, list, inspect and prune task environment images.")
app.add_typer(model_app, name="model", help="Serve and inspect models.")
app.add_typer(harness_app, name="harness", help="List and install agent harnesses (Claude Code, Codex, ...).")
app.add_typer(
    datasets_app,
    name="datasets",
    help="List and fetch registry datasets by name; show a Python dataset.",
)
app.add_typer(jobs_app, name="jobs", help="List, summarise and compare job directories.")
trial_app.command("files", short_help="List, print or extract a trial's kept final filesystem.")(trial_files)
app.add_typer(trial_app, name="trial", help="Show one trial of a job.")


def _version(value: bool) -> None:
    if value:
        from evsys import __version__

        typer.echo(f"evsys {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print evsys's version and exit."),
    ] = False,
) -> None:
    """Run LLM agents on tasks in isolated sandboxes, score them, and get token-exact trajectories back."""


if __name__ == "__main__":
    app()
