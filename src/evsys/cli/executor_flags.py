"""`evsys run --executor` and the executor settings flags (`--ray-address`, `--ray-mode`, `--workers`) as the
job's `ExecutorSpec`, validated once. A resume keeps the executor its config.json records; naming the same one
again keeps the recorded options and changes only the flags given; naming another one starts from its
defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evsys.cli.checks import console, fail

if TYPE_CHECKING:
    from evsys.engine.config import ExecutorSpec, JobConfig

OPTION_FLAGS = {"address": "--ray-address", "mode": "--ray-mode", "workers": "--workers"}
"""Executor option field -> the `evsys run` flag that sets it."""
FLAG_EXECUTOR = {"address": "ray", "mode": "ray", "workers": "processes"}
"""Executor option field -> the executor whose flag it is."""


@dataclass
class ExecutorFlags:
    """What the command line said about the executor: `--executor` (None: not given) and option fields."""

    name: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


def executor_spec(
    name: str | None, options: dict[str, Any], recorded: ExecutorSpec | None = None
) -> ExecutorSpec:
    """The executor to run on: `name` (None: the `recorded` one, else local) with the option fields the flags
    gave (`options`) over the recorded options when it is the recorded executor; a usage error naming the flag
    when the executor is unknown, cannot run here, or refuses a setting."""
    from pydantic import ValidationError

    from evsys.engine.config import ExecutorSpec
    from evsys.engine.executor_plugins import DEFAULT_EXECUTOR
    from evsys.engine.executors.base import ExecutorUnavailableError, executor_class

    if name is None:
        name = recorded.name if recorded is not None else DEFAULT_EXECUTOR
    try:
        cls = executor_class(name)
    except ValueError as exc:
        raise fail(str(exc)) from None
    refused = sorted(options.keys() - cls.options_model.model_fields.keys())
    if refused:
        field = refused[0]
        needs = f"{OPTION_FLAGS[field]} needs --executor {FLAG_EXECUTOR[field]}"
        raise fail(f"{needs} (executor {name!r} takes no {field})")
    same = recorded is not None and recorded.name == name
    base = recorded.options.model_dump(exclude_unset=True) if recorded is not None and same else {}
    try:
        cls.check_available()
        return ExecutorSpec(name=name, options=cls.parse_options({**base, **options}))
    except ExecutorUnavailableError as exc:
        raise fail(str(exc)) from None
    except ValidationError as exc:
        raise fail("; ".join(_flag_error(name, error) for error in exc.errors())) from None


def _flag_error(name: str, error: Any) -> str:
    field = str(error["loc"][0]) if error["loc"] else ""
    where = OPTION_FLAGS.get(field, f"executor {name!r} option {field!r}")
    return f"{where}: {error['msg']}"


def resume_hint(job_dir: Any, executor: ExecutorSpec) -> str:
    """The command that resumes `job_dir`; it names the executor when the job does not run locally."""
    from evsys.engine.executor_plugins import DEFAULT_EXECUTOR

    command = f"evsys run --resume {job_dir}"
    return command if executor.name == DEFAULT_EXECUTOR else f"{command} --executor {executor.name}"


def automatic_executor(config: JobConfig, flags: ExecutorFlags) -> JobConfig:
    """`config` on the processes executor when the command line chose no executor and the job is one it
    runs better (`prefers_processes`: model-driven trials over HTTP at -n >= 256 on >= 8 usable cores), saying
    so; else `config` unchanged."""
    from evsys.engine.config import ExecutorSpec
    from evsys.engine.executors.processes import ProcessExecutor, prefers_processes, usable_cores

    if flags.name is not None or flags.options or not prefers_processes(config):
        return config
    console.print(
        f"note: -n {config.n_concurrent} model-driven trials run over {usable_cores()} worker processes "
        "(--executor processes); --executor local keeps them in this process",
        highlight=False,
    )
    return config.model_copy(update={"executor": ExecutorSpec(name=ProcessExecutor.name)})
