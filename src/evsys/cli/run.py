"""`evsys run`: run agents on task directories (or resume a job) with a live progress bar and a summary table.

Exit codes: 0 when the job ran (whatever the rewards), 2 on usage errors, 130 when cancelled by Ctrl-C/SIGTERM
(the job directory stays resumable with `evsys run --resume jobs/<name>`). The flags become a JobConfig in
`run_config`, the job runs in `run_job`, and `summary` prints the tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from evsys.cli.agent_env import read_agent_env, restore_env
from evsys.cli.checks import (
    console,
    flags_given,
    import_from_current_directory,
    require_writable,
    resume_job,
    run_preflight,
)
from evsys.cli.complete import (
    complete_agent,
    complete_executor,
    complete_job_dir,
    complete_model,
    complete_sandbox,
)
from evsys.cli.datasets import RegistryPath, RegistryUrl
from evsys.cli.executor_flags import ExecutorFlags, resume_hint
from evsys.cli.generation import MaxTokens, MaxTurns, Temperature, generation_kwargs
from evsys.cli.job_file import AgentFlags
from evsys.cli.progress import DEFAULT_INTERVAL
from evsys.cli.run_config import (
    DatasetFlags,
    NetworkChoice,
    RayMode,
    check_env_executor,
    log_limits,
    new_job_config,
)
from evsys.cli.run_job import EXIT_CANCELLED, run_job
from evsys.cli.summary import print_summary, stdout_console
from evsys.records.state import DEFAULT_STATE_LIMIT_MB


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
        list[str] | None,
        typer.Option(
            "-m",
            "--model",
            help="Model for model-driven agents; repeat for several (every agent runs with each).",
            autocompletion=complete_model,
        ),
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
    temperature: Temperature = None,
    max_tokens: MaxTokens = None,
    max_turns: MaxTurns = None,
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
    keep_state: Annotated[
        bool,
        typer.Option(
            "--keep-state",
            help="Keep each trial's final filesystem (what the agent phase wrote; local backend) in "
            "<trial>/state/ for `evsys trial files` and `evsys rescore`; sandboxes are then not reused.",
        ),
    ] = False,
    keep_state_limit: Annotated[
        int,
        typer.Option("--keep-state-limit", min=1, help="MB of file content --keep-state keeps per trial."),
    ] = DEFAULT_STATE_LIMIT_MB,
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
        bool,
        typer.Option(
            "--stream", help="Print trials' events live: phases, agent turns, harness calls and tool calls."
        ),
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
        "keep_state_mb": keep_state_limit if keep_state else None,
        "task_names": task or [],
        "task_filters": task_filter or [],
        "exclude_task_names": exclude_task or [],
        "n_tasks": n_tasks,
        "task_sample_seed": task_seed,
        "log_limits": log_limits(log_limit or []),
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
        require_writable(job.job_dir, f"--resume {resume}")
        restore_env(job.config, env)
        check_env_executor(job.config)
        job.tasksets = run_preflight(job.config, probe=model_probe, strict=False).tasksets
    else:
        kwargs = [*(agent_kwarg or []), *(["mcp_tools=true"] if harness_mcp_tools else [])]
        generation = generation_kwargs(temperature, max_tokens, max_turns)
        agents = AgentFlags(agent, model or [], base_url, kwargs, env, generation)
        datasets = DatasetFlags(dataset or [], registry_path, registry_url)
        config = new_job_config(ctx, paths or [], datasets, config_file, agents, settings, where)
        check_env_executor(config)
        require_writable(config.jobs_dir, f"--jobs-dir {config.jobs_dir}")
        report = run_preflight(config, probe=model_probe, strict=strict)
        job = Job(config, retry_errors=retry_errors, tasksets=report.tasksets)
    if stream:
        from evsys.cli.stream import event_printer

        job.on_agent_event = event_printer(console)
    result = run_job(job, progress_interval)
    print_summary(stdout_console(), result, job.job_dir)
    if job.cancelled:
        console.print(
            f"[yellow]cancelled[/]: resume with `{resume_hint(job.job_dir, job.config.executor)}`",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_CANCELLED)
