"""The tasks a server offers: planned once like trials of a job, handed out per episode by name or seed."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path

from evsys.engine.config import AgentSpec, JobConfig, slugify
from evsys.engine.episodes.protocol import ErrorCode, ServeError
from evsys.engine.plan import plan_trials
from evsys.engine.spec import PlannedTrial, TrialSpec
from evsys.task.models import Task
from evsys.task.select import TaskNameError, resolve_task_name, short_name

SERVED_AGENT = "openenv-client"
EPISODE_NUMBER = re.compile(r"__served__(\d+)$")


@dataclass
class ServedTask:
    """One task of the catalog: its name, the loaded task and the planned spec episodes copy."""

    name: str
    task: Task
    spec: TrialSpec


@dataclass
class TaskCatalog:
    """Tasks in a stable (sorted) order; `pick` chooses one by name or seed; invalid tasks are listed."""

    tasks: list[ServedTask]
    job: JobConfig
    skipped: list[str] = field(default_factory=list)
    _counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @classmethod
    def load(cls, dataset: Path, job: JobConfig) -> TaskCatalog:
        """Plan every task of `dataset` once; a task that cannot run or be served is skipped (and named in
        `skipped`, which `evsys serve` prints at start)."""
        tasks: list[ServedTask] = []
        skipped: list[str] = []
        harness = job.agents[0].name != SERVED_AGENT
        for planned in plan_trials(job):
            reason = _unservable(planned, harness)
            if reason is not None or planned.task is None:
                skipped.append(f"{planned.config.task_name}: {reason}")
                continue
            tasks.append(ServedTask(planned.config.task_name, planned.task, planned.spec))
        if not tasks:
            raise ValueError(f"{dataset}: no task can be served ({'; '.join(skipped) or 'empty'})")
        return cls(sorted(tasks, key=lambda t: t.name), job, skipped)

    @staticmethod
    def job_config(
        dataset: Path,
        *,
        job_name: str,
        jobs_dir: Path,
        sandbox: str = "local",
        harness: str | None = None,
        model: str | None = None,
        base_url: str | None = None,
    ) -> JobConfig:
        """The job served episodes are recorded in (its one agent: the client, or its harness)."""
        agent = AgentSpec(name=harness or SERVED_AGENT, model=model, base_url=base_url)
        return JobConfig(
            datasets=[dataset],
            agents=[agent],
            job_name=job_name,
            jobs_dir=jobs_dir,
            sandbox=sandbox,
        )

    @property
    def names(self) -> list[str]:
        """Every task name, in catalog order."""
        return [t.name for t in self.tasks]

    def pick(self, name: str | None, seed: int | None) -> ServedTask:
        """The task called `name` (its full `org/name`, or its short name when no other task shares it), else
        the one at `seed` modulo the task count, else the first."""
        if name is not None:
            try:
                name = resolve_task_name(name, self.names)
            except TaskNameError as exc:
                raise ServeError(ErrorCode.UNKNOWN_TASK, str(exc)) from None
            return next(task for task in self.tasks if task.name == name)
        return self.tasks[(seed or 0) % len(self.tasks)]

    def continue_after(self, taken: int) -> None:
        """Number the next episodes after `taken` (a job directory served before keeps its trials)."""
        self._counter = itertools.count(taken + 1)

    def episode_spec(self, task: ServedTask, group: str | None = None) -> TrialSpec:
        """A spec for a new episode of `task` in `group`, under a trial name no other episode of this server
        has."""
        n = next(self._counter)
        name = f"{slugify(short_name(task.name), max_len=80)}__served__{n}"
        config = task.spec.config.model_copy(update={"trial_name": name, "attempt": n, "group": group})
        return task.spec.model_copy(update={"config": config})


def _unservable(planned: PlannedTrial, harness: bool) -> str | None:
    """Why a planned task cannot be served (None when it can): it cannot run, or it has `[[steps]]` and the
    server runs a harness (a harness turn has no step boundary to score)."""
    if planned.failure is not None:
        return planned.failure.message
    if planned.task is None:
        return "not loadable"
    if harness and planned.task.steps:
        return "a multi-step task cannot be served with --harness (serve it without one: one submit per step)"
    return None


__all__ = ["SERVED_AGENT", "PlannedTrial", "ServedTask", "TaskCatalog"]
