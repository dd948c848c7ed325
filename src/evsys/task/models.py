"""Task records: the Harbor-compatible `task.toml` schema and the loaded `Task`.

The loader (`evsys.task.loader`) fills these; the engine reads them. Field names follow Harbor's task.toml
(schema 1.4) so existing task directories load unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evsys.records import CopyOutLimits, FileCopy, NetworkMode
from evsys.task.compose import ComposeProject
from evsys.task.turns import Interaction


class _Section(BaseModel):
    """A task.toml section: unknown keys are kept (and warned about by the loader)."""

    model_config = ConfigDict(extra="allow")


class TaskMeta(_Section):
    """`[task]`: identity of the task."""

    name: str | None = None
    version: str | None = None
    description: str | None = None


class PhaseNetwork(_Section):
    """`network_mode` / `allowed_hosts` of `[agent]` and `[verifier]`: a phase's own network, replacing the
    environment's baseline while that phase runs (unset: the baseline)."""

    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None


class VerifierConfig(PhaseNetwork):
    """`[verifier]`: how the reward is computed."""

    timeout_sec: float = 600.0
    env: dict[str, str] = Field(default_factory=dict)
    user: str | None = None
    environment_mode: Literal["shared", "separate"] = "shared"
    function: str | None = Field(
        None,
        description="A verifier function or rubric (registered name, `module:fn` or `file.py:fn` relative "
        "to the task directory) run host-side after tests/test.sh, given the script's rewards as "
        "`rewards=`; its rewards replace the script's.",
    )


class AgentSection(PhaseNetwork):
    """`[agent]`: limits on the agent."""

    timeout_sec: float = 600.0
    setup_timeout_sec: float = 360.0
    user: str | None = None


class HealthcheckConfig(_Section):
    """`[environment.healthcheck]`: a command run as root after the sandbox starts, until it exits 0, before
    the agent is set up (Docker's HEALTHCHECK semantics, as Harbor runs it)."""

    command: str
    interval_sec: float = Field(5.0, ge=0, description="Between attempts after the start period.")
    timeout_sec: float = Field(30.0, gt=0, description="Limit of one attempt.")
    start_period_sec: float = Field(0.0, ge=0, description="Failures in this grace period do not count.")
    start_interval_sec: float = Field(5.0, ge=0, description="Between attempts during the start period.")
    retries: int = Field(3, ge=1, description="Consecutive failures after the start period that fail it.")


class McpServerConfig(_Section):
    """One `[[environment.mcp_servers]]` entry (Harbor's schema): an MCP server the task offers its agent.

    `stdio` servers are started inside the sandbox (`command` + `args`, in the task's working directory);
    `streamable-http` (also spelt `http`) and `sse` servers are reached at `url` from inside the sandbox, so
    the task's network mode applies. Without `transport`, a server with a `command` and no `url` is `stdio`
    (else `sse`, Harbor's default). Header values may name host variables as `${VAR}`."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,47}$")
    transport: Literal["stdio", "sse", "streamable-http"] = "sse"
    url: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("transport", mode="before")
    @classmethod
    def _http_alias(cls, value: object) -> object:
        return "streamable-http" if value == "http" else value

    @model_validator(mode="before")
    @classmethod
    def _stdio_when_only_a_command(cls, data: Any) -> Any:
        """No `transport`, a `command` and no `url`: stdio (Harbor's default, `sse`, needs a url)."""
        if isinstance(data, dict) and "transport" not in data and data.get("command") and not data.get("url"):
            return {**data, "transport": "stdio"}
        return data

    @model_validator(mode="after")
    def _fields_for_transport(self) -> McpServerConfig:
        if self.transport == "stdio" and not self.command:
            raise ValueError(f"MCP server {self.name!r}: transport 'stdio' needs a command")
        if self.transport != "stdio" and not self.url:
            raise ValueError(f"MCP server {self.name!r}: transport {self.transport!r} needs a url")
        if self.transport == "stdio" and self.headers:
            raise ValueError(f"MCP server {self.name!r}: headers are for HTTP transports only")
        return self

    def resolved_headers(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The headers with each `${VAR}` replaced from `environ` (a missing variable becomes '')."""
        return {
            key: re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: environ.get(m.group(1), ""), value)
            for key, value in self.headers.items()
        }


class EnvironmentConfig(_Section):
    """`[environment]`: the sandbox the task runs in."""

    build_timeout_sec: float = 600.0
    docker_image: str | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    gpus: int = 0
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    network_mode: NetworkMode = Field(
        "public", description="Harbor's default: public (slirp4netns locally); Python tasks use no-network."
    )
    allowed_hosts: list[str] = Field(default_factory=list)
    healthcheck: HealthcheckConfig | None = None
    mcp_servers: list[McpServerConfig] = Field(
        default_factory=list,
        description="MCP servers the agent is given (harness configs, loop-agent tools).",
    )
    logs: CopyOutLimits = Field(
        default_factory=CopyOutLimits,
        description="evsys: `[environment.logs]`, bounds on copying /logs out (max_bytes, max_entries, "
        "max_depth, max_file_bytes); a job's `--log-limit` wins.",
    )


class SolutionConfig(_Section):
    """`[solution]`: how the reference solution runs."""

    env: dict[str, str] = Field(default_factory=dict)


class ArtifactSpec(_Section):
    """One `artifacts` entry: a path in the agent's sandbox copied out after the agent (into the trial's
    `artifacts/<destination>`, default its base name) and, for a separate verifier, into its sandbox at the
    same path. A plain string is the `source`."""

    source: str
    destination: str | None = None


class StepAgentSection(PhaseNetwork):
    """`[steps.agent]`: a step's own agent limits (unset: the task's `[agent]`)."""

    timeout_sec: float | None = None
    user: str | None = None


class StepVerifierSection(PhaseNetwork):
    """`[steps.verifier]`: a step's own verifier settings (unset: the task's `[verifier]`)."""

    timeout_sec: float | None = None
    env: dict[str, str] = Field(default_factory=dict)
    user: str | None = None


class StepConfig(_Section):
    """One `[[steps]]` entry of a multi-step task: its files live in `steps/<name>/` (instruction.md,
    tests/, solution/, workdir/ with an optional setup.sh)."""

    name: str
    agent: StepAgentSection = Field(default_factory=StepAgentSection)
    verifier: StepVerifierSection = Field(default_factory=StepVerifierSection)
    min_reward: float | dict[str, float] | None = Field(
        None,
        description="Stop after this step when its reward (a number: the `reward` key; a table: each key) is "
        "below the threshold or missing.",
    )


class TaskConfig(_Section):
    """The whole `task.toml`."""

    schema_version: str | None = None
    task: TaskMeta = Field(default_factory=TaskMeta)
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    agent: AgentSection = Field(default_factory=AgentSection)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)
    steps: list[StepConfig] | None = Field(None, description="A multi-step task's steps, run in order.")
    artifacts: list[str | ArtifactSpec] = Field(
        default_factory=list, description="Paths copied out of the agent's sandbox (see ArtifactSpec)."
    )
    multi_step_reward_strategy: Literal["mean", "final"] | None = Field(
        None,
        description="A multi-step task's reward: per-key means over the steps that were scored (default), "
        "or the last step's rewards.",
    )


class CopyOptions(BaseModel):
    """The ownership and mode flags of one Dockerfile `COPY`/`ADD` line, kept for image builders."""

    line: int
    dst: str
    chown: str | None = None
    chmod: str | None = None


Severity = Literal["error", "warning"]


class Problem(BaseModel):
    """One thing wrong with a task directory, located by file (relative to the task) and field or line."""

    file: str
    field: str | None = None
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        where = f"{self.file}:{self.field}" if self.field else self.file
        return f"{where}: {self.message}"


class ResolvedEnvironment(BaseModel):
    """The task's environment after applying its Dockerfile's image-free directives (WORKDIR, ENV, COPY/ADD).

    `needs_image` is set when the Dockerfile has directives only an image build can honour (RUN, ...) or
    names a base the host's root filesystem does not provably stand in for (`base_reason`, see hostbase.py);
    such a task runs on the host rootfs only when the user skips the build (`ran_on_host_image`).
    """

    workdir: str = "/app"
    env: dict[str, str] = Field(default_factory=dict)
    files: list[FileCopy] = Field(default_factory=list)
    base_image: str | None = None
    needs_image: bool = False
    image_reasons: list[str] = Field(
        default_factory=list, description="Why an image build is needed, per line."
    )
    base_reason: str | None = Field(
        None,
        description="The reason among `image_reasons` that is the base itself (the host does not provide "
        "it): how evsys runs the task, not a problem of the task.",
    )
    user: str | None = Field(None, description="The last Dockerfile `USER`, if any.")
    copy_options: list[CopyOptions] = Field(
        default_factory=list, description="`--chown`/`--chmod` flags of COPY/ADD lines (not applied locally)."
    )
    ignored: list[str] = Field(
        default_factory=list,
        description="Directives the local sandbox does not apply (EXPOSE, CMD, ...), per line.",
    )
    compose: ComposeProject | None = Field(
        None, description="The sidecar services of environment/docker-compose.yaml, if any."
    )


class TaskStep(BaseModel):
    """A step of a multi-step task, as loaded: what its agent is told and where its files are."""

    config: StepConfig
    instruction: str
    dir: Path = Field(description="steps/<name>/")
    tests_dirs: list[Path] = Field(
        default_factory=list, description="The task's tests/ then the step's tests/ (placed over it)."
    )
    solution_dir: Path | None = Field(None, description="The step's solution/, else the task's.")

    @property
    def name(self) -> str:
        """The step's name (its directory under steps/)."""
        return self.config.name


class Task(BaseModel):
    """A loaded task directory (or a Python task materialised as one)."""

    name: str
    path: Path
    instruction: str
    system_prompt: str | None = Field(
        None, description="A Python task's own system prompt; agents use it instead of their default one."
    )
    interaction: Interaction = Field(
        default_factory=Interaction,
        description="A Python task's tools, respond hook and turn limit (evsys.task.turns).",
    )
    config: TaskConfig = Field(default_factory=TaskConfig)
    environment: ResolvedEnvironment = Field(default_factory=ResolvedEnvironment)
    tests_dir: Path | None = None
    solution_dir: Path | None = None
    steps: list[TaskStep] = Field(default_factory=list, description="Empty for a single-step task.")
    warnings: list[str] = Field(default_factory=list, description="Non-fatal problems found while loading.")
