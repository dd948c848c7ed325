"""The `Agent` base class: who acts in a trial, and what it gets and gives back.

An agent subclasses `Agent`; it has a `name`, an `async setup(sandbox, ctx)` (install a harness, warm a
cache; bounded by the setup timeout) and an `async run(instruction, sandbox, ctx) -> AgentResult` (bounded by
the agent timeout; the trial cancels it on timeout and then kills every process left in the sandbox). The
`AgentContext` carries what the trial knows: the task, the host directory for agent logs, the model name and
client (None for oracle/nop), and a `TrajectoryRecorder` the agent appends its steps to (token ids, logprobs,
loss mask, usage, cost).

Hooks with defaults: `async prepare_sandbox(spec, ctx) -> SandboxSpec` runs before the sandbox starts
(counted as setup; a harness agent adds binds for its install tree and proxy socket there), and
`async close()` runs when the trial ends, whatever happened (stop helpers the agent started outside the
sandbox).

An agent whose first steps need no sandbox (the loop agent: its first model call needs only the instruction)
sets `starts_before_sandbox = True` and implements `async run_early(instruction, ctx)`: the trial runs it
while the sandbox starts, so the start hides behind inference, and `run` continues from where it got. When
the sandbox fails to start, the trial cancels `run_early` and fails with the sandbox's cause.

Errors: any exception from `run` fails the trial with cause `agent_error`; a `CausedError` (evsys.records)
fails it with its own `failure_cause` (e.g. `ModelCallError` or a model client's `ModelError`:
`model_error`). Both are retried when the job allows retries.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from evsys.model.base import ModelClient
from evsys.records import CausedError, FailureCause, SandboxSpec, Step, TrajectoryRecorder, Usage
from evsys.sandbox.base import Sandbox

if TYPE_CHECKING:
    from evsys.task.models import Task


ModelUse = Literal["none", "optional", "required"]
"""Whether an agent talks to a model: never (`oracle`, `nop`: a model given to it is ignored, never checked
or built), when one is given (the default), or always (`loop`, the harnesses: pre-flight refuses it without
one)."""


class AgentError(CausedError):
    """The agent failed (cause `agent_error`)."""

    failure_cause = FailureCause.AGENT_ERROR


class AgentTimeoutError(AgentError):
    """The agent ran past its timeout (cause `agent_timeout`, never retried)."""

    failure_cause = FailureCause.AGENT_TIMEOUT


class ModelCallError(AgentError):
    """A model call failed: unreachable server, rate limit, malformed response (cause `model_error`)."""

    failure_cause = FailureCause.MODEL_ERROR


class AgentResult(BaseModel):
    """What an agent run returns. Its steps follow those recorded via the context."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    usage: Usage | None = Field(
        None, description="Tokens and cost; when None, summed from the trajectory's steps."
    )
    steps: list[Step] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


class AgentContext:
    """What a trial hands its agent: task, host logs dir, model name/client and the trajectory recorder."""

    def __init__(
        self,
        *,
        task: Task,
        trial_name: str,
        logs_dir: Path,
        trajectory: TrajectoryRecorder,
        model_name: str | None = None,
        model_client: ModelClient | None = None,
        timeout_sec: float | None = None,
        kwargs: dict[str, Any] | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.task = task
        self.env = dict(env or {})  # the job's --agent-env / --env-file for this agent (secrets: never log)
        self.trial_name = trial_name
        self.logs_dir = logs_dir
        self.trajectory = trajectory
        self.model_name = model_name
        self.model_client = model_client
        self.timeout_sec = timeout_sec
        self.kwargs = dict(kwargs or {})
        self.on_event = on_event

    def emit(self, event: dict[str, Any]) -> None:
        """Report a live event (e.g. a harness event) to whoever watches the trial (`evsys run --stream`)."""
        if self.on_event is not None:
            self.on_event({"trial": self.trial_name, **event})

    @property
    def workdir(self) -> str:
        """The task's working directory inside the sandbox."""
        return self.task.environment.workdir


class Agent(ABC):
    """The base class of every agent: `setup` once per trial, then `run` the instruction in the sandbox.

    Subclass it and implement `setup` and `run`; `prepare_sandbox` and `close` are hooks with defaults that do
    nothing. `name` is the agent's name in results (the registry sets it from the name it was resolved by when
    a subclass leaves it empty); `version` is recorded in the trajectory; `model_use` says whether it talks to
    a model (see `ModelUse`)."""

    name: str = ""
    version: str = "unknown"
    model_use: ClassVar[ModelUse] = "optional"
    starts_before_sandbox: ClassVar[bool] = False  # True: `run_early` runs while the sandbox starts

    @abstractmethod
    async def setup(self, sandbox: Sandbox, ctx: AgentContext) -> None:
        """Prepare the sandbox for this agent (bounded by the setup timeout)."""

    @abstractmethod
    async def run(self, instruction: str, sandbox: Sandbox, ctx: AgentContext) -> AgentResult:
        """Act on the instruction (bounded by the agent timeout) and report usage and steps."""

    async def run_early(self, instruction: str, ctx: AgentContext) -> None:
        """The start of `run` that needs no sandbox, run by the trial while the sandbox starts (only for an
        agent with `starts_before_sandbox`; `run` then continues from it). Cancelled when the sandbox fails;
        an exception it raises fails the agent phase as one from `run` would."""
        raise NotImplementedError(f"{type(self).__name__} does not start before its sandbox")

    async def prepare_sandbox(self, spec: SandboxSpec, ctx: AgentContext) -> SandboxSpec:
        """The trial's sandbox spec before the sandbox starts, adjusted as this agent needs (counted as setup;
        a harness agent binds its install tree and proxy socket here). The default keeps it as it is."""
        return spec

    async def close(self) -> None:  # noqa: B027 - a hook with a default that does nothing
        """Called when the trial ends, whatever happened: stop helpers started outside the sandbox."""
