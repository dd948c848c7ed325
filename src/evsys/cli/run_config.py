"""How `evsys run` turns its flags into a JobConfig: the choices its options take, the job's settings, the
agents from -a/-m/--base-url/--agent-kwarg (or a job file with the flags on top), and the checks a usage error
comes from."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from evsys.cli.checks import all_flags, console, flags_given
from evsys.cli.checks import fail as _fail
from evsys.cli.datasets import dataset_paths
from evsys.cli.executor_flags import ExecutorFlags, automatic_executor, executor_spec
from evsys.cli.generation import apply_generation, once_without_model
from evsys.cli.job_file import CONFIG_FLAGS, AgentFlags, config_from_file, validation_message

if TYPE_CHECKING:
    from evsys.engine.config import JobConfig


class NetworkChoice(StrEnum):
    """`--network`: the network every phase of every trial gets."""

    NO_NETWORK = "no-network"
    PUBLIC = "public"


class RayMode(StrEnum):
    """`--ray-mode`: one Ray task per trial, or one actor per node running many trials."""

    TASKS = "tasks"
    ACTORS = "actors"


def build_job(
    paths: list[Path],
    agents: list[str],
    models: list[str],
    base_url: str | None,
    agent_kwargs: list[str],
    settings: dict[str, Any],
    flags: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> JobConfig:
    """The JobConfig of task paths, agent flags and settings: every agent once per model in `models` (once,
    with no model, when it is empty); a usage error names the flag at fault."""
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
        each_model: list[str | None] = [*models] or [None]
        specs = [
            AgentSpec(name=name, model=model, base_url=base_url, kwargs=kwargs, env=env or {})  # type: ignore[arg-type]
            for name in (agents or ["oracle"])
            for model in each_model
        ]
        return JobConfig(datasets=paths, agents=specs, **{k: v for k, v in settings.items() if v is not None})
    except (ValueError, ValidationError) as exc:
        raise _fail(validation_message(exc, {**(flags or {}), **CONFIG_FLAGS})) from None


def check_env_executor(config: JobConfig) -> None:
    """Agent environment stays in this process: refuse it on an executor that ships trials elsewhere; and
    whatever else the executor cannot run (`Executor.check_job`), before anything starts."""
    from evsys.engine.executor_plugins import DEFAULT_EXECUTOR
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


def log_limits(texts: list[str]) -> dict[str, int] | None:
    """The `--log-limit KEY=VALUE` flags as a dict (None when there are none); a usage error if one is bad."""
    from evsys.records import parse_limit

    try:
        return dict(parse_limit(text) for text in texts) or None
    except ValueError as exc:
        raise _fail(str(exc)) from None


@dataclass
class DatasetFlags:
    """What `-d/--dataset`, `--registry-path` and `--registry-url` said."""

    names: list[str]
    registry_path: Path | None = None
    registry_url: str | None = None


def new_job_config(
    ctx: typer.Context,
    paths: list[Path],
    datasets: DatasetFlags,
    config_file: Path | None,
    agents: AgentFlags,
    settings: dict[str, Any],
    where: ExecutorFlags,
) -> JobConfig:
    """The JobConfig of a new job: task paths and registry datasets, the agents, the executor, and the job
    file (when given) under the flags."""
    settings = {**settings, "executor": executor_spec(where.name, where.options)}
    flags = all_flags(ctx)
    paths = [*paths, *dataset_paths(datasets.names, datasets.registry_path, datasets.registry_url)]
    if config_file is not None:
        config = config_from_file(config_file, flags_given(ctx), settings, paths, agents, flags)
        return apply_generation(once_without_model(config), agents.generation)
    config = build_job(
        paths, agents.names or [], agents.models, agents.base_url, agents.kwargs, settings, flags, agents.env
    )
    config = apply_generation(once_without_model(config), agents.generation)
    return automatic_executor(config, where)  # a flag's choice is kept
