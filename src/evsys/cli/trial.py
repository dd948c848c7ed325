"""`evsys trial show jobs/<job>/<trial>`: one trial's story in the terminal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.panel import Panel

from evsys.cli.complete import complete_trial_dir
from evsys.cli.markup import shown

if TYPE_CHECKING:
    from evsys.records import Step
    from evsys.viewer.trialdata import LoadedTrial

trial_app = typer.Typer(no_args_is_help=True, help="Show one trial of a job.")

TEXT_LIMIT = 2000  # characters of one message or observation shown (--full shows everything)


def _clip(text: str, full: bool) -> str:
    if full or len(text) <= TEXT_LIMIT:
        return text
    return text[:TEXT_LIMIT] + f"\n… ({len(text) - TEXT_LIMIT} more characters; --full shows them)"


@trial_app.command("show", short_help="One trial's steps, tool calls and verifier output (--json).")
def show(
    trial_dir: Annotated[
        Path,
        typer.Argument(help="A trial directory (jobs/<job>/<trial>).", autocompletion=complete_trial_dir),
    ],
    full: Annotated[bool, typer.Option("--full", help="Do not shorten long messages and output.")] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the trial as JSON (result, config, trajectory, verifier output, problems)."
        ),
    ] = False,
) -> None:
    """Outcome, integrity findings, timing, every step (messages, tool calls, observations) and the
    verifier's output."""
    from evsys.viewer.files import UnsafePathError
    from evsys.viewer.trialdata import load_trial

    out = Console(highlight=False)
    trial_dir = trial_dir.resolve()
    _check_is_trial(trial_dir)
    try:
        trial = load_trial(trial_dir.parent, trial_dir.name)
    except (UnsafePathError, OSError) as exc:
        Console(stderr=True, highlight=False).print(f"[bold red]error:[/] {shown(str(exc))}")
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(
            json.dumps(trial.model_dump(mode="json", exclude={"token_texts"}), indent=2, ensure_ascii=False)
        )
        return
    for problem in trial.problems:
        out.print(f"[yellow]{shown(problem)}[/]")
    _outcome(out, trial)
    if trial.trajectory is not None:
        for step in trial.trajectory.steps:
            _step(out, step, full)
    for text in trial.verifier:
        title = f"verifier/{shown(text.path.split('/', 1)[-1])}"
        out.print(Panel(shown(_clip(text.text, full)), title=title))
    if trial.exception is not None:
        out.print(Panel(shown(_clip(trial.exception.text, full)), title="exception.txt", border_style="red"))
    if trial.logs:
        out.print("logs: " + ", ".join(shown(f.path) for f in trial.logs))


def _check_is_trial(path: Path) -> None:
    """Exit 2 with a hint unless `path` is a trial directory (a directory of a job directory)."""
    from evsys.viewer.jobdata import is_job_dir

    if is_job_dir(path.parent):
        return
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    if is_job_dir(path):
        trials = sorted(p.name for p in path.iterdir() if p.is_dir() and (p / "config.json").is_file())
        example = f" (e.g. {shown(str(path / trials[0]))})" if trials else ""
        err.print(
            f"[bold red]error:[/] {shown(str(path))} is a job directory: give one of its trials{example}, "
            f"or see the whole job with `evsys jobs show {shown(str(path))}`"
        )
    else:
        err.print(f"[bold red]error:[/] {shown(str(path))} is not a trial directory (jobs/<job>/<trial>)")
    raise typer.Exit(2)


def _no_rewards(trial: LoadedTrial) -> str:
    """Why a trial has no reward keys: no reward file, or one that could not be read."""
    names = [t.path.rsplit("/", 1)[-1] for t in trial.verifier]
    files = [name for name in names if name in ("reward.txt", "reward.json")]
    if files:
        return f"verifier/{files[0]} is unreadable"
    return "no reward file"


def _outcome(out: Console, trial: LoadedTrial) -> None:
    result = trial.result
    if result is None:
        unreadable = [
            p
            for p in trial.problems
            if p.startswith(f"{trial.name}/result.json: ") and not p.endswith(": missing")
        ]
        why = f"{unreadable[0]} (the trial's result is unknown)" if unreadable else "no result.json yet"
        out.print(f"[bold]{shown(trial.name)}[/]: {shown(why)}")
        return
    reward = "-" if result.reward is None else f"{result.reward:.3f}"
    keys = ", ".join(f"{k} {v:.3f}" for k, v in (result.rewards or {}).items())
    agent = f"{result.agent} ({result.model})" if result.model else result.agent
    out.print(f"[bold]{shown(trial.name)}[/]  task {shown(result.task_name)}  agent {shown(agent)}")
    status = "[green]ok[/]" if result.failure is None else f"[red]{result.failure.cause.value}[/]"
    out.print(f"reward {reward} ({shown(keys) or _no_rewards(trial)})  {status}")
    if result.failure is not None:
        out.print(f"[red]{shown(result.failure.message)}[/]")
    if result.integrity:
        lines = [
            f"[red]{f.kind.value}[/]: {shown(f.evidence)} [dim]({shown(f.source or '?')})[/]"
            for f in result.integrity
        ]
        out.print(Panel("\n".join(lines), title=f"integrity findings ({len(lines)})", border_style="red"))
    phases = [(name, value) for name, value in result.timing.model_dump().items() if value is not None]
    out.print("timing: " + ", ".join(f"{name} {value:.2f}s" for name, value in phases))


def _step(out: Console, step: Step, full: bool) -> None:
    parts: list[str] = []
    if step.reasoning_content:
        parts.append(f"[dim]reasoning: {shown(_clip(step.reasoning_content, full))}[/]")
    if step.message:
        parts.append(shown(_clip(step.message, full)))
    for call in step.tool_calls or []:
        args = json.dumps(call.arguments, ensure_ascii=False)
        parts.append(f"[cyan]→ {shown(call.function_name)}[/] {shown(_clip(args, full))}")
    for result in step.observation.results if step.observation else []:
        content = result.content if isinstance(result.content, str) else json.dumps(result.content)
        parts.append(f"[green]←[/] {shown(_clip(content or '', full))}")
    metrics = step.metrics
    if metrics is not None and metrics.completion_token_ids is not None:
        note = f"{len(metrics.completion_token_ids)} completion tokens"
        extra = metrics.model_extra or {}
        if extra.get("extends_previous") is False:
            note += f", [red]prefix break at token {extra.get('prefix_break_at', '?')}[/]"
        parts.append(f"[dim]{note}[/]")
    title = shown(f"{step.step_id} {step.source}")
    out.print(Panel("\n".join(parts) or "[dim](empty)[/]", title=title, title_align="left"))
