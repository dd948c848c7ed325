"""`evsys run`: run agents on task directories (or resume a job) with a live progress bar and a summary table.

Exit codes: 0 when the job ran (whatever the rewards), 2 on usage errors, 130 when cancelled by Ctrl-C/SIGTERM
(the job directory stays resumable with `evsys run --resume jobs/<name>`).
"""

from __future__ import annotations

import asyncio
import os
import signal
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from evsys.cli.agent_env import read_agent_env, restore_env
from evsys.cli.checks import (
    all_flags,
    console,
    flags_given,
    import_from_current_directory,
    resume_job,
    run_preflight,
    save_traceback,
)
from evsys.cli.checks import fail as _fail
from evsys.cli.complete import (
    complete_agent,
    complete_executor,
    complete_job_dir,
    complete_model,
    complete_sandbox,
)
from evsys.cli.datasets import RegistryPath, RegistryUrl, dataset_paths
from evsys.cli.executor_flags import ExecutorFlags, automatic_executor, executor_spec, resume_hint
from evsys.cli.job_file import CONFIG_FLAGS, AgentFlags, config_from_file, validation_message
from evsys.cli.markup import shown
from evsys.cli.progress import DEFAULT_INTERVAL, live_progress

if TYPE_CHECKING:
    from evsys.engine.config import JobConfig
    from evsys.engine.job import Job
    from evsys.records import JobResult


class NetworkChoice(StrEnum):
    """`--network`: the network every phase of every trial gets."""

    NO_NETWORK = "no-network"
    PUBLIC = "public"


class RayMode(StrEnum):
    """`--ray-mode`: one Ray task per trial, or one actor per node running many trials."""

    TASKS = "tasks"
    ACTORS = "actors"


EXIT_CANCELLED = 130


def _stdout_console() -> Console:
    """stdout; wide enough for the summary table when it is not a terminal (logs, CI, pipes)."""
    out = Console()
    return out if out.is_terminal else Console(width=200)


def _build_job(
    paths: list[Path],
    agents: list[str],
    model: str | None,
    base_url: str | None,
    agent_kwargs: list[str],
    settings: dict,
    flags: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> JobConfig:
    from pydantic import ValidationError

    from evsys.agent.registry import parse_agent_kwarg
    from evsys.engine import AgentSpec, JobConfig
    from evsys.engine.preflight import dedupe_paths

    if not paths:
        raise _fail("give at least one task directory or dataset path (or --resume jobs/<name>)")
    paths, dropped = dedupe_paths(paths)
    for path in dropped:
        console.print(f"[yellow]note:[/] {path} is given more than once; its tasks run once", highlight=False)
    try:
        kwargs = dict(parse_agent_kwarg(text) for text in agent_kwargs)
        specs = [
            AgentSpec(name=name, model=model, base_url=base_url, kwargs=kwargs, env=env or {})  # type: ignore[arg-type]
            for name in (agents or ["oracle"])
        ]
        return JobConfig(datasets=paths, agents=specs, **{k: v for k, v in settings.items() if v is not None})
    except (ValueError, ValidationError) as exc:
        raise _fail(validation_message(exc, {**(flags or {}), **CONFIG_FLAGS})) from None


def _check_env_executor(config: JobConfig) -> None:
    """Agent environment stays in this process: refuse it on an executor that ships trials elsewhere; and
    whatever else the executor cannot run (`Executor.check_job`), before anything starts."""
    from evsys.engine.config import DEFAULT_EXECUTOR
    from evsys.engine.executors.base import executor_class

    if config.executor.name != DEFAULT_EXECUTOR and any(agent.env for agent in config.agents):
        raise _fail(
            f"--agent-env/--env-file values are never shipped to the {config.executor.name} executor's "
            "workers; set them in its environment (for Ray: the runtime_env) instead"
        )
    try:
        executor_class(config.executor.name).check_job(config)
    except ValueError as exc:
        raise _fail(str(exc)) from None


def _log_limits(texts: list[str]) -> dict[str, int] | None:
    """The `--log-limit KEY=VALUE` flags as a dict (None when there are none); a usage error if one is bad."""
    from evsys.records import parse_limit

    try:
        return dict(parse_limit(text) for text in texts) or None
    except ValueError as exc:
        raise _fail(str(exc)) from None


def run(
    ctx: typer.Context,
    paths: Annotated[
        list[Path] | None, typer.Argument(help="Task directories or datasets.", show_default=False)
    ] = None,
    config_file: Annotated[
        Path | None,
        typer.Option(
            "-c",
            "--config",
            help="A job file (YAML or JSON of JobConfig fields, e.g. from `evsys jobs config`); flags given "
            "win over it.",
        ),
    ] = None,
    agent: Annotated[
        list[str] | None,
        typer.Option(
            "-a",
            "--agent",
            help="oracle | nop | loop | a harness (evsys harness list) | module:Class",
            autocompletion=complete_agent,
        ),
    ] = None,
    agent_env: Annotated[
        list[str] | None,
        typer.Option(
            "--agent-env",
            "--ae",
            help="KEY=VALUE in every agent's environment (repeatable); never saved in clear.",
        ),
    ] = None,
    env_file: Annotated[
        list[Path] | None,
        typer.Option("--env-file", help="A .env file of KEY=VALUE lines for the agents (repeatable)."),
    ] = None,
    dataset: Annotated[
        list[str] | None,
        typer.Option(
            "-d", "--dataset", help="A dataset by name (NAME@VERSION) from the registry; repeatable."
        ),
    ] = None,
    registry_path: RegistryPath = None,
    registry_url: RegistryUrl = None,
    model: Annotated[
        str | None,
        typer.Option("-m", "--model", help="Model for model-driven agents.", autocompletion=complete_model),
    ] = None,
    base_url: Annotated[
        str | None, typer.Option("--base-url", help="OpenAI-compatible server URL for the model.")
    ] = None,
    n_attempts: Annotated[int, typer.Option("-k", "--n-attempts", help="Attempts per task and agent.")] = 1,
    n_concurrent: Annotated[int, typer.Option("-n", "--n-concurrent", help="Trials running at once.")] = 4,
    jobs_dir: Annotated[Path, typer.Option("--jobs-dir", help="Where job directories go.")] = Path("jobs"),
    job_name: Annotated[str | None, typer.Option("--job-name", help="Default: the start time.")] = None,
    max_retries: Annotated[int, typer.Option("--max-retries", help="Retries of retryable failures.")] = 0,
    agent_timeout_multiplier: Annotated[
        float, typer.Option("--agent-timeout-multiplier", help="Scale every task's agent timeout.")
    ] = 1.0,
    verifier_timeout_multiplier: Annotated[
        float, typer.Option("--verifier-timeout-multiplier", help="Scale every task's verifier timeout.")
    ] = 1.0,
    setup_timeout_multiplier: Annotated[
        float,
        typer.Option("--setup-timeout-multiplier", help="Scale sandbox start and agent setup timeouts."),
    ] = 1.0,
    agent_kwarg: Annotated[
        list[str] | None, typer.Option("--agent-kwarg", help="key=value for the agent.")
    ] = None,
    harness_mcp_tools: Annotated[
        bool,
        typer.Option(
            "--harness-mcp-tools",
            help="Harness agents also get evsys's sandbox tools over MCP (= --agent-kwarg mcp_tools=true).",
        ),
    ] = False,
    skip_build: Annotated[
        bool, typer.Option("--skip-build", help="Run image-needing tasks on the host image.")
    ] = False,
    pull: Annotated[
        str,
        typer.Option(
            "--pull",
            help="When docker_image and FROM bases are pulled: missing (not cached), always, never.",
        ),
    ] = "missing",
    sandbox: Annotated[
        str,
        typer.Option(
            "--sandbox",
            help="Sandbox backend (local, or one a plugin registers).",
            autocompletion=complete_sandbox,
        ),
    ] = "local",
    network: Annotated[
        NetworkChoice | None,
        typer.Option(
            "--network",
            help="Give every phase of every trial this network instead of its task's (task directories "
            "default to public).",
        ),
    ] = None,
    reuse_sandboxes: Annotated[
        bool,
        typer.Option(
            "--reuse-sandboxes/--fresh-sandboxes",
            help="Keep sandboxes between trials of one environment and reset them (default), or start a "
            "fresh sandbox for every trial.",
        ),
    ] = True,
    warm_sandboxes: Annotated[
        int,
        typer.Option(
            "--warm-sandboxes",
            min=0,
            help="Keep N started sandboxes per environment ready ahead of demand (bounded by memory; stopped "
            "when idle and when the job ends).",
        ),
    ] = 0,
    task: Annotated[
        list[str] | None,
        typer.Option("--task", "-t", help="Only tasks whose name matches (glob; repeat for more)."),
    ] = None,
    task_filter: Annotated[
        list[str] | None,
        typer.Option(
            "--filter",
            help="KEY=VALUE: only tasks whose task.toml [metadata] KEY matches the glob VALUE (a list such "
            "as tags matches when any element does); repeat to narrow (one key repeated: either value).",
        ),
    ] = None,
    exclude_task: Annotated[
        list[str] | None,
        typer.Option("--exclude-task", "-x", help="Leave out tasks whose name matches (glob; repeat)."),
    ] = None,
    n_tasks: Annotated[
        int | None,
        typer.Option(
            "--n-tasks",
            "-l",
            help="Run only N of the selected tasks, sampled with --task-seed (the same N on every run).",
        ),
    ] = None,
    task_seed: Annotated[int, typer.Option("--task-seed", help="Seed of the --n-tasks sample.")] = 0,
    log_limit: Annotated[
        list[str] | None,
        typer.Option(
            "--log-limit",
            help="KEY=VALUE bound on copying each trial's /logs out (max_bytes, max_entries, max_depth, "
            "max_file_bytes; sizes may end in K/M/G); wins over the task's [environment.logs].",
        ),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            autocompletion=complete_job_dir,
            help="Resume the job in this directory; -n, --max-retries, the timeout multipliers and "
            "sandbox reuse may change, other flags are refused.",
        ),
    ] = None,
    retry_errors: Annotated[
        bool, typer.Option("--retry-errors", help="On resume, rerun errored trials too.")
    ] = False,
    stream: Annotated[
        bool, typer.Option("--stream", help="Print harness events (model calls, tool calls, text) live.")
    ] = False,
    strict: Annotated[
        bool, typer.Option("--strict", help="Refuse to start when a task directory is invalid.")
    ] = False,
    executor: Annotated[
        str,
        typer.Option(
            "--executor",
            autocompletion=complete_executor,
            help="Where trials run: local (this process), processes (worker processes on this machine) or "
            "ray (a Ray cluster). Not given: processes for model-driven trials over HTTP at -n >= 256 on "
            ">= 8 usable cores, else local; a resume keeps the job's recorded executor unless this names "
            "one.",
            show_default=False,
        ),
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            help="With --executor ray: the cluster (auto, host:6379, ray://host:10001); default: "
            "$RAY_ADDRESS, else a Ray started on this machine.",
        ),
    ] = None,
    ray_mode: Annotated[
        RayMode,
        typer.Option("--ray-mode", help="With --executor ray: one Ray task per trial, or an actor per node."),
    ] = RayMode.TASKS,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=1,
            help="With --executor processes: how many worker processes (default: the usable cores).",
        ),
    ] = None,
    model_probe: Annotated[
        bool,
        typer.Option(
            "--model-probe/--no-model-probe", help="Check the model server answers before starting."
        ),
    ] = True,
    progress_interval: Annotated[
        float,
        typer.Option(
            "--progress-interval",
            min=0.1,
            help="Without a terminal (CI, pipes): seconds between plain 'progress:' lines on stderr.",
        ),
    ] = DEFAULT_INTERVAL,
) -> None:
    """Run agents on tasks in sandboxes and score them; or resume a job with --resume jobs/<name>."""
    settings: dict[str, Any] = {
        "job_name": job_name,
        "jobs_dir": jobs_dir,
        "n_attempts": n_attempts,
        "n_concurrent": n_concurrent,
        "max_retries": max_retries,
        "agent_timeout_multiplier": agent_timeout_multiplier,
        "verifier_timeout_multiplier": verifier_timeout_multiplier,
        "setup_timeout_multiplier": setup_timeout_multiplier,
        "skip_build": skip_build,
        "pull": pull,
        "sandbox": sandbox,
        "network": network.value if network is not None else None,
        "reuse_sandboxes": reuse_sandboxes,
        "warm_sandboxes": warm_sandboxes,
        "task_names": task or [],
        "task_filters": task_filter or [],
        "exclude_task_names": exclude_task or [],
        "n_tasks": n_tasks,
        "task_sample_seed": task_seed,
        "log_limits": _log_limits(log_limit or []),
    }
    from evsys.engine import Job

    import_from_current_directory()
    given = flags_given(ctx)
    where = ExecutorFlags(
        name=executor if "executor" in given else None,
        options={
            field: value
            for field, param, value in (
                ("address", "ray_address", ray_address),
                ("mode", "ray_mode", ray_mode.value),
                ("workers", "workers", workers),
            )
            if param in given
        },
    )
    env = read_agent_env(agent_env or [], env_file or [])
    if resume is not None:
        job = resume_job(ctx, resume, paths or [], retry_errors, settings, where)
        restore_env(job.config, env)
        _check_env_executor(job.config)
        job.tasksets = run_preflight(job.config, probe=model_probe, strict=False).tasksets
    else:
        settings["executor"] = executor_spec(where.name, where.options)
        flags = all_flags(ctx)
        paths = [*(paths or []), *dataset_paths(dataset or [], registry_path, registry_url)]
        kwargs = [*(agent_kwarg or []), *(["mcp_tools=true"] if harness_mcp_tools else [])]
        if config_file is not None:
            agents = AgentFlags(agent, model, base_url, kwargs, env)
            config = config_from_file(config_file, given, settings, paths, agents, flags)
        else:
            config = _build_job(paths, agent or [], model, base_url, kwargs, settings, flags, env)
            config = automatic_executor(config, where)  # a job file's or flag's choice is kept
        _check_env_executor(config)
        report = run_preflight(config, probe=model_probe, strict=strict)
        job = Job(config, retry_errors=retry_errors, tasksets=report.tasksets)
    if stream:
        from evsys.cli.stream import event_printer

        job.on_agent_event = event_printer(console)
    result = _run_job(job, progress_interval)
    print_summary(_stdout_console(), result, job.job_dir)
    if job.cancelled:
        console.print(
            f"[yellow]cancelled[/]: resume with `{resume_hint(job.job_dir, job.config.executor)}`",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_CANCELLED)


def _run_job(job: Job, progress_interval: float = DEFAULT_INTERVAL) -> JobResult:
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


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


MAX_TASK_ROWS = 40


def print_task_table(out: Console, result: JobResult) -> None:
    """Reward per task and agent (mean over attempts) with failure causes; skipped for large datasets."""
    from rich.table import Table

    from evsys.engine.metrics import scored

    cells: dict[str, dict[str, list]] = {}
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


MAX_TRACEBACK_LINES = 5


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


def print_summary(out: Console, result: JobResult, job_dir: Path | str) -> None:
    """The summary table per (agent, model, dataset), then the job directory."""
    from rich.table import Table

    table = Table(title=f"job {shown(result.job_name)}", title_justify="left")
    for column in ("agent", "model", "dataset", "trials", "errors", "mean reward", "per key", "pass@k"):
        table.add_column(column, overflow="fold")
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
