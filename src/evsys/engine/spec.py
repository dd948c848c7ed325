"""`TrialSpec`: everything a worker needs to run one trial, as data (JSON and pickle round-trip).

A spec names its task by reference — a task directory path, or a Python task row carried inline (its
verifier function by an importable name such as `pkg.mod:fn`, so another process can load it) — names its
agent and model as an `AgentSpec` (a model *string* plus settings; the worker builds its own client), its
sandbox backend by name, and carries the trial's timeouts and any failure decided while planning. `run_trial`
(evsys.engine.run) turns a spec into a `TrialResult`; executors (evsys.engine.executors) decide where.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from evsys.engine.config import JobConfig, TrialConfig
from evsys.records import TrialFailure
from evsys.task.loader import TaskLoadError, load_task_cached
from evsys.task.models import EnvironmentConfig, Task, TaskConfig, VerifierConfig
from evsys.task.python import PYTHON_VERIFIER_TIMEOUT_SEC, PromptTask, PythonTask, VerifiedTask
from evsys.util.imports import import_module_or_file


class TaskRef(BaseModel):
    """Which task a trial runs: a task directory, or a Python task row (inline)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["directory", "python"]
    path: Path = Field(description="The task directory, or the dataset a Python task came from.")
    python_task: PythonTask | None = None
    imports: list[str] = Field(
        default_factory=list,
        description="Modules or .py files a worker imports first (a dataset's verifier_module).",
    )

    @classmethod
    def directory(cls, path: Path) -> TaskRef:
        """A reference to a task directory."""
        return cls(kind="directory", path=Path(path).absolute())

    @classmethod
    def python(
        cls, task: VerifiedTask | PromptTask, dataset: Path, imports: list[str] | None = None
    ) -> TaskRef:
        """A reference to a Python task: the row itself, with a verifier another process can import."""
        return cls(
            kind="python", path=Path(dataset).absolute(), python_task=task, imports=list(imports or [])
        )

    def load(self) -> Task:
        """The `Task` to run: the loaded directory, or the Python task as a task without tests.

        Raises `TaskLoadError` for a directory that no longer loads, ImportError for a missing module.
        """
        for module in self.imports:
            import_module_or_file(module, base_dir=self.path)
        if self.kind == "directory":  # a worker's trials of one task parse its directory once
            return load_task_cached(self.path)
        assert self.python_task is not None
        return python_task_as_task(self.python_task, self.path)


def python_task_as_task(task: VerifiedTask | PromptTask, root: Path) -> Task:
    """The `Task` a Python task runs as: its prompt as instruction, its system prompt, the default environment
    without network (a Python task's own default, unlike a task directory's public one), its verifier's
    limit."""
    timeout = task.verifier_timeout_sec or PYTHON_VERIFIER_TIMEOUT_SEC
    config = TaskConfig(
        environment=EnvironmentConfig(network_mode="no-network", mcp_servers=task.mcp_servers),
        verifier=VerifierConfig(timeout_sec=timeout),
    )
    return Task(
        name=task.id,
        path=root,
        instruction=task.prompt,
        system_prompt=task.system_prompt,
        config=config,
        interaction=task.interaction,
    )


class TrialSpec(BaseModel):
    """One trial as data: a worker anywhere can run it with `run_trial(spec)`."""

    model_config = ConfigDict(extra="forbid")

    config: TrialConfig
    task: TaskRef
    job_name: str
    sandbox: str = Field("local", description="The sandbox backend's registered name.")
    skip_build: bool = False
    pull: Literal["missing", "always", "never"] = Field(
        "missing", description="When a task's image and its bases are pulled (the job's `pull`)."
    )
    failure: TrialFailure | None = Field(None, description="Decided while planning: the trial does not run.")
    retries: list[TrialFailure] = Field(default_factory=list, description="Failures of earlier tries.")

    @property
    def trial_name(self) -> str:
        """The trial's (unique) name: its directory in the job."""
        return self.config.trial_name

    @property
    def python_task(self) -> VerifiedTask | PromptTask | None:
        """The Python task, for a trial of one."""
        return self.task.python_task

    @classmethod
    def for_job(
        cls, job: JobConfig, config: TrialConfig, task: TaskRef, failure: TrialFailure | None
    ) -> TrialSpec:
        """A spec with the job-wide settings (name, sandbox backend, skip_build) filled in."""
        return cls(
            config=config,
            task=task,
            job_name=job.job_name,
            sandbox=job.sandbox,
            skip_build=job.skip_build,
            pull=job.pull,
            failure=failure,
        )


@dataclass
class PlannedTrial:
    """A trial of the plan: its spec, and the task as loaded while planning (None when it failed to load; a
    worker in another process loads it again from `spec.task`)."""

    spec: TrialSpec
    task: Task | None = None

    @property
    def config(self) -> TrialConfig:
        """The trial's config."""
        return self.spec.config

    @property
    def failure(self) -> TrialFailure | None:
        """The failure decided while planning, if any."""
        return self.spec.failure

    @property
    def python_task(self) -> VerifiedTask | PromptTask | None:
        """The Python task of a trial of one, else None."""
        return self.spec.python_task


__all__ = ["PlannedTrial", "TaskLoadError", "TaskRef", "TrialSpec", "python_task_as_task"]
