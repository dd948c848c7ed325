"""Job configuration files: `evsys run -c job.yaml` and `evsys jobs config jobs/<name>` (the file a finished
job would be rerun from).

A job file is a `JobConfig` in YAML (or JSON, so a job's own `config.json` works too): the same field names.
Flags given on the command line win over the file: task paths replace `datasets`, `-a` replaces `agents`
(with `-m`, `--base-url` and `--agent-kwarg`), and `-m`, `--base-url` or `--agent-kwarg` alone apply to every
agent of the file; any other flag replaces its field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evsys.cli.checks import fail

if TYPE_CHECKING:
    from evsys.engine.config import JobConfig

KeyPath = tuple[str | int, ...]
"""Where a key of a job file is: its keys and list indexes from the root (`("agents", 0, "name")`)."""

PARAM_FIELDS = {
    "task": "task_names",
    "exclude_task": "exclude_task_names",
    "task_seed": "task_sample_seed",
    "log_limit": "log_limits",
    "ray_address": "executor",
    "ray_mode": "executor",
    "workers": "executor",
}
"""`evsys run` parameters that set a JobConfig field of another name."""

RERUN_EXCLUDED = ("job_name",)  # a rerun gets a new job directory
"""Fields of a job's config.json left out of the job file written from it."""


def validation_message(
    exc: Exception, flags: dict[str, str] | None = None, lines: dict[KeyPath, int] | None = None
) -> str:
    """The error as the user typed it: a config field is named by its flag (`-k/--n-attempts`), a key of a
    job file by its line (`lines`, from `key_lines`), and a misspelt field gets a did-you-mean."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        flags, lines = flags or {}, lines or {}
        parts = []
        for error in exc.errors():
            loc = tuple(error["loc"])
            field = ".".join(map(str, loc))
            where = f"line {lines[loc]}: " if loc in lines else ""
            parts.append(f"{where}{flags.get(field, field)}: {error['msg']}{_did_you_mean(error)}")
        return "; ".join(parts)
    return str(exc)


def _did_you_mean(error: Any) -> str:
    """For an unknown key of a job file: the closest field of the record it was written in."""
    from evsys.engine.config import JobConfig
    from evsys.util.registry import did_you_mean

    if error["type"] != "extra_forbidden":
        return ""
    model = _model_at(JobConfig, tuple(error["loc"]))
    return did_you_mean(str(error["loc"][-1]), list(model.model_fields)) if model is not None else ""


def _model_at(model: Any, loc: KeyPath) -> Any:
    """The pydantic model holding the field `loc[-1]` of `model` (list indexes and optional types looked
    through), or None."""
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        info = model.model_fields.get(part)
        model = _nested_model(info.annotation) if info is not None else None
        if model is None:
            return None
    return model


def _nested_model(annotation: Any) -> Any:
    from typing import get_args

    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_nested_model, get_args(annotation)) if m is not None), None)


def key_lines(text: str) -> dict[KeyPath, int]:
    """The line (1-based) of every key and list item of a YAML document, by its path (`("agents", 0,
    "name")`); empty when it does not parse."""
    import yaml

    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return {}
    found: dict[KeyPath, int] = {}

    def walk(node: Any, path: KeyPath) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                found[(*path, key.value)] = key.start_mark.line + 1
                walk(value, (*path, key.value))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                found[(*path, index)] = item.start_mark.line + 1
                walk(item, (*path, index))

    walk(root, ())
    return found


CONFIG_FLAGS = {
    "task_names": "--task",
    "exclude_task_names": "--exclude-task",
    "task_sample_seed": "--task-seed",
}  # config fields whose flag is not named after them


@dataclass
class AgentFlags:
    """What `-a`, `-m` (each model given), `--base-url`, `--agent-kwarg` and the generation flags said."""

    names: list[str] | None
    models: list[str]
    base_url: str | None
    kwargs: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    generation: dict[str, Any] = field(default_factory=dict)  # --temperature, --max-tokens, --max-turns


def config_from_file(
    path: Path,
    given: dict[str, str],
    settings: dict[str, Any],
    paths: list[Path],
    agents: AgentFlags,
    flags: dict[str, str],
) -> JobConfig:
    """The JobConfig of job file `path` with the flags given on top; usage errors name the file and field."""
    from pydantic import SecretStr, ValidationError

    from evsys.agent.registry import parse_agent_kwarg
    from evsys.engine import AgentSpec, JobConfig

    data = read_job_file(path)
    fields = {PARAM_FIELDS.get(name, name) for name in given}
    try:
        kwargs = dict(parse_agent_kwarg(text) for text in agents.kwargs)
        overrides: dict[str, Any] = {
            name: value
            for name, value, flag in (
                ("base_url", agents.base_url, "base_url"),
                ("kwargs", kwargs, "agent_kwarg"),
            )
            if flag in given
        }
        # -m given: every agent of the file (or of -a) once per model
        per_model = [{**overrides, "model": model} for model in agents.models] or [overrides]
        specs = None
        if agents.names:
            specs = [AgentSpec(name=n, **o).model_dump(mode="json") for n in agents.names for o in per_model]
        merged = merge_job_file(data, fields, settings, paths, specs, per_model)
        config = JobConfig.model_validate(merged)
    except (ValueError, ValidationError) as exc:
        lines = key_lines(path.read_text(encoding="utf-8"))
        message = validation_message(exc, {**flags, **CONFIG_FLAGS}, lines)
        raise fail(f"job file {path}: {message}") from None
    for agent in config.agents:  # values only from the command line, never from a job file
        agent.env = {**agent.env, **{name: SecretStr(value) for name, value in agents.env.items()}}
    return config


def read_job_file(path: Path) -> dict[str, Any]:
    """The mapping in a YAML or JSON job file; a usage error naming the file when it is not one."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise fail(f"cannot read job file {path}: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise fail(f"job file {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise fail(
            f"job file {path} must hold a mapping of JobConfig fields (datasets, agents, n_attempts, ...)"
        )
    return data


def merge_job_file(
    data: dict[str, Any],
    given: set[str],
    settings: dict[str, Any],
    paths: list[Path],
    agents: list[dict[str, Any]] | None,
    agent_overrides: list[dict[str, Any]],
) -> dict[str, Any]:
    """The job file's fields with the flags that were given on top (see the module docstring).

    `given` names the JobConfig fields set by flags on the command line, `settings` holds the flags' values
    by field, `agents` the agent specs `-a` built (None without `-a`), and `agent_overrides` what `-m`,
    `--base-url` and `--agent-kwarg` set, one per model `-m` gave (applied to every agent of the file when
    `-a` was not given: each agent once per model)."""
    merged = dict(data)
    for name, value in settings.items():
        if name in given and value is not None:
            merged[name] = value
    if paths:
        merged["datasets"] = [str(p) for p in paths]
    if agents is not None:
        merged["agents"] = agents
    elif any(agent_overrides):
        merged["agents"] = [
            _override(agent, overrides)
            for agent in merged.get("agents") or [{}]
            for overrides in agent_overrides
        ]
    return merged


def _override(agent: Any, overrides: dict[str, Any]) -> Any:
    if not isinstance(agent, dict):
        return agent  # left for JobConfig's validation to name
    kwargs = {**(agent.get("kwargs") or {}), **overrides.get("kwargs", {})}
    return {**agent, **{k: v for k, v in overrides.items() if k != "kwargs"}, "kwargs": kwargs}


def job_file_text(config_json: dict[str, Any]) -> str:
    """YAML for rerunning a job from its config.json: every field but the job name."""
    import yaml

    data = {k: v for k, v in config_json.items() if k not in RERUN_EXCLUDED}
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
