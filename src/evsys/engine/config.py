"""`JobConfig` and `AgentSpec`: everything needed to run (and later resume) a job, saved as `config.json`."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    SerializeAsAny,
    field_validator,
    model_validator,
)

from evsys.engine.executor_plugins import DEFAULT_EXECUTOR, NoOptions, parse_executor_options
from evsys.records import DEFAULT_LIMITS, CopyOutLimits, NetworkMode
from evsys.task.select import TaskFilter, name_matches, parse_filter

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slugify(text: str, *, max_len: int = 80) -> str:
    """A file-name-safe version of `text` (letters, digits, `.`, `_`, `-`; never empty, never `.`/`..`)."""
    slug = _UNSAFE.sub("-", text).strip("-.") or "x"
    return slug[:max_len].rstrip("-.") or "x"


def default_job_name() -> str:
    """A job name from the local time, e.g. `2026-11-22__05-30-12`."""
    return datetime.now().strftime("%Y-%m-%d__%H-%M-%S")


RESUME_SAFE_FIELDS = (
    "n_concurrent",
    "max_retries",
    "retry_min_wait_sec",
    "retry_max_wait_sec",
    "agent_timeout_multiplier",
    "verifier_timeout_multiplier",
    "setup_timeout_multiplier",
    "reuse_sandboxes",
    "warm_sandboxes",
    "executor",
    "keep_state_mb",
)
"""JobConfig fields a resume may change: how trials run, never which trials there are or what they do."""


class ExecutorSpec(BaseModel):
    """Where a job's trials run: an executor's registered name and its options, validated once (when the
    spec is made or read from config.json) as that executor's `options_model`, e.g. `RayOptions`."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        DEFAULT_EXECUTOR, min_length=1, description="A registered executor (local, processes, ray, ...)."
    )
    options: SerializeAsAny[BaseModel] = Field(
        default_factory=NoOptions, description="The executor's settings, as its `options_model`."
    )

    @model_validator(mode="before")
    @classmethod
    def _typed_options(cls, data: Any) -> Any:
        """`options` as the named executor's `options_model`; an unknown name lists the known ones."""
        if not isinstance(data, dict):
            return data
        options = parse_executor_options(data.get("name", DEFAULT_EXECUTOR), data.get("options"))
        return {**data, "options": options}


class AgentSpec(BaseModel):
    """One agent of a job: a name (`oracle`, `nop`, `loop`, a harness, `module:Class`), model, kwargs."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    model: str | None = None
    base_url: str | None = Field(
        None, description="OpenAI-compatible server for the model (vllm:, sglang:, ...)."
    )
    kwargs: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="Environment for the agent (`--agent-env`, `--env-file`): harnesses get it in their "
        "process environment, custom agents as `ctx.env`. Saved files hold only the names; values are "
        "`**********` in config.json, and a resume needs them given again.",
    )

    @property
    def slug(self) -> str:
        """The agent's part of trial names: its class or name, plus the model's last path segment."""
        base = self.name.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
        if self.model:
            base = f"{base}-{self.model.rstrip('/').rsplit('/', 1)[-1]}"
        return slugify(base, max_len=40)


class JobConfig(BaseModel):
    """A job: datasets x agents x attempts, concurrency, retries, timeouts, where results go."""

    model_config = ConfigDict(extra="forbid")

    datasets: list[Path] = Field(
        min_length=1, description="Task directories or directories of task directories."
    )
    agents: list[AgentSpec] = Field(default_factory=lambda: [AgentSpec(name="oracle")], min_length=1)
    job_name: str = Field(default_factory=default_job_name)
    jobs_dir: Path = Path("jobs")
    n_attempts: int = Field(1, ge=1)
    n_concurrent: int = Field(4, ge=1)
    max_retries: int = Field(0, ge=0)
    retry_min_wait_sec: float = Field(1.0, ge=0)
    retry_max_wait_sec: float = Field(30.0, ge=0)
    agent_timeout_multiplier: float = Field(1.0, gt=0)
    verifier_timeout_multiplier: float = Field(1.0, gt=0)
    verifier_timeout_sec: float | None = Field(
        None, gt=0, description="Every verifier's limit, in place of the task's own (not scaled)."
    )
    setup_timeout_multiplier: float = Field(1.0, gt=0)
    skip_build: bool = False
    pull: Literal["missing", "always", "never"] = Field(
        "missing",
        description="When `docker_image` and FROM bases are pulled: missing (from the cache), always, never.",
    )
    sandbox: str = "local"
    reuse_sandboxes: bool = Field(
        True,
        description="Keep sandboxes between trials of the same environment and reset them (every process "
        "killed, a fresh root, /tmp, /dev and IPC namespace) instead of stopping and starting one per trial.",
    )
    warm_sandboxes: int = Field(
        0,
        ge=0,
        description="Keep this many started sandboxes per environment spec ready ahead of demand "
        "(evsys.sandbox.pool.warm): bounded by memory, stopped when idle and when the job ends.",
    )
    task_names: list[str] = Field(default_factory=list, description="Glob patterns; empty = every task.")
    task_filters: list[str] = Field(
        default_factory=list,
        description="`KEY=GLOB` filters on task `[metadata]` (`evsys run --filter`, evsys.task.select).",
    )
    exclude_task_names: list[str] = Field(
        default_factory=list, description="Glob patterns of tasks left out (`evsys run --exclude-task`)."
    )
    n_tasks: int | None = Field(
        None,
        ge=1,
        description="Run only this many of the selected tasks, sampled with `task_sample_seed` (the same "
        "tasks on every run and resume of the config); None: every selected task.",
    )
    task_sample_seed: int = Field(0, description="Seed of the `n_tasks` sample.")
    network: NetworkMode | None = Field(
        None,
        description="Every phase of every trial gets this network instead of what its task says "
        "(`evsys run --network`); None: each task's own policy (task directories default to public).",
    )
    log_limits: CopyOutLimits = Field(
        default_factory=CopyOutLimits,
        description="Bounds on copying each trial's /logs out; the fields set here win over the task's "
        "`[environment.logs]`, the evsys defaults fill the rest.",
    )
    keep_state_mb: int | None = Field(
        None,
        ge=1,
        description="`evsys run --keep-state`: keep each trial's final filesystem (what the agent phase "
        "wrote, compressed, in `<trial>/state/`) up to this many MB of file content, for `evsys rescore`; "
        "None: not kept. Kept sandboxes are not reused (a reset one's written layer is out of reach).",
    )
    executor: ExecutorSpec = Field(
        default_factory=ExecutorSpec,
        description="Where the trials run (`evsys run --executor`); a resume keeps it unless told otherwise. "
        "A config.json without it (written before evsys recorded it) means the local executor.",
    )

    @model_validator(mode="after")
    def _unique_default_name(self) -> JobConfig:
        """A defaulted name (the start time, to the second) gets `-2`, `-3`, ... when a job of that second
        already has the directory, so two jobs started in one second never collide; a given name is kept."""
        if "job_name" not in self.model_fields_set:
            base, n = self.job_name, 2
            while (self.jobs_dir / self.job_name).exists():
                self.job_name, n = f"{base}-{n}", n + 1
        return self

    @model_validator(mode="after")
    def _fresh_sandboxes_for_kept_state(self) -> JobConfig:
        """With `keep_state_mb`, every trial gets a sandbox started for it (`reuse_sandboxes` off)."""
        if self.keep_state_mb is not None:
            self.reuse_sandboxes = False
        return self

    @field_validator("task_filters")
    @classmethod
    def _parsable_filters(cls, value: list[str]) -> list[str]:
        for text in value:
            parse_filter(text)
        return value

    @field_validator("job_name")
    @classmethod
    def _safe_job_name(cls, value: str) -> str:
        if not value or slugify(value) != value:
            raise ValueError(f"'{value}' is not a usable job name (letters, digits, '.', '_', '-' only)")
        return value

    @property
    def job_dir(self) -> Path:
        """Where this job's files live: `<jobs_dir>/<job_name>`."""
        return self.jobs_dir / self.job_name

    @property
    def metadata_filters(self) -> list[TaskFilter]:
        """`task_filters` parsed."""
        return [parse_filter(text) for text in self.task_filters]


class StepTimeouts(BaseModel):
    """One step's timeouts as the trial runs them: the step's own, else the task's, scaled by the job."""

    agent_timeout_sec: float | None = None
    verifier_timeout_sec: float | None = None


class TrialConfig(BaseModel):
    """One planned trial, written to `<job>/<trial>/config.json`. Its timeouts are the task's scaled by the
    job's multipliers, computed once when planning; the trial uses them as they are."""

    trial_name: str
    task_name: str
    task_path: Path
    dataset: str
    agent: AgentSpec
    attempt: int = Field(ge=1)
    agent_timeout_sec: float | None = None
    verifier_timeout_sec: float | None = None
    setup_timeout_sec: float | None = None
    sandbox_start_timeout_sec: float | None = None
    build_timeout_sec: float | None = Field(
        None, description="The limit on building the task's image and its sidecars' (scaled when planned)."
    )
    step_timeouts: dict[str, StepTimeouts] = Field(
        default_factory=dict, description="A multi-step task's timeouts per step name (scaled when planned)."
    )
    not_runnable: str | None = Field(
        None, description="Why the trial cannot run (task_invalid, environment_unsupported)."
    )
    network: NetworkMode | None = Field(None, description="The job's network override, if any.")
    log_limits: CopyOutLimits = Field(
        default_factory=lambda: DEFAULT_LIMITS, description="The bounds on copying this trial's /logs out."
    )
    keep_state_mb: int | None = Field(
        None, description="Keep the trial's final filesystem up to this many MB (the job's `keep_state_mb`)."
    )
    dataset_version: str | None = Field(None, description="The dataset's version (a Python dataset's).")
    group: str | None = Field(
        None,
        description="The group whose rewards this trial's are compared with, when not all of its task's: a "
        "served episode's (the client's group_id, else its session's).",
    )


def selects_task(config: JobConfig, name: str) -> bool:
    """True when the job's `--task` patterns (if any) match `name` and no `--exclude-task` pattern does (a
    pattern without `/` also matches the short name: `create-file` selects `evsys/create-file`)."""
    included = not config.task_names or any(name_matches(p, name) for p in config.task_names)
    return included and not any(name_matches(p, name) for p in config.exclude_task_names)
