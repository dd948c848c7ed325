"""`run_rollouts`: the RL front door. Items in, one scored `TrajectoryGroup` per item out, in input order.

```python
groups = await run_rollouts(items, num_samples=8, model="local", n_concurrent=16)
groups = await run_rollouts("examples/tasks", num_samples=4, model="local")  # task directories
gen = await run_rollouts(["Write a haiku"], outcome_reward=False, num_samples=4, model="local")
```

Items are what `evsys run` takes (evsys.engine.sources): a task directory or a directory of them, a Harbor
`dataset.toml` directory, `NAME@VERSION`, a rows file, loaded `Task`s, repository rows, or Python tasks in
memory. For tasks on disk the groups follow the job's plan (one per task, in the order `evsys run` runs them,
`task_id` the task's name). It builds a `Job` over the items (`num_samples` attempts each, the `loop` agent
unless `agent` names another), runs it, and puts every trial into a group — its trajectory as the job kept it
in memory, not read back from disk: token ids, loss mask, logprobs, reward(s), group-relative advantage, and
the error of any trial that failed (the group keeps it and counts it). Every trial is also on disk under
`<jobs_dir>/<job_name>/`, ready for `evsys export`; the items are saved there as a Python-task dataset
(`tasks/dataset.toml` + `tasks.jsonl`), so `Job.resume(job_dir)` (or
`evsys run --resume`) can finish an interrupted run as long as the same verifiers are registered.
"""

from __future__ import annotations

import asyncio
import functools
import json
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, ParamSpec

from pydantic import BaseModel

from evsys.agent.oracle import OracleAgent
from evsys.agent.registry import agent_plugin
from evsys.engine.config import AgentSpec, ExecutorSpec, JobConfig
from evsys.engine.executors.base import executor_class
from evsys.engine.job import Job, ModelClientFactory
from evsys.engine.preflight import missing_references
from evsys.engine.sources import resolve_tasks
from evsys.engine.spec import PlannedTrial
from evsys.model.base import ChatCompleter, Completion, Message, SamplingParams, ToolSchema
from evsys.records import (
    AdvantageMethod,
    FailureCause,
    IntegrityPolicy,
    JobResult,
    RolloutError,
    RolloutTrajectory,
    TrajectoryGroup,
)
from evsys.repo.rows import RepoTask
from evsys.sandbox.pool import SandboxPool
from evsys.task.python import TASK_FIELDS, PromptTask, VerifiedTask, load_python_tasks
from evsys.trajectory.advantages import ADVANTAGE_METHODS
from evsys.trajectory.groups import finalize_group, rollout_from_trial
from evsys.trajectory.integrity import integrity_policy
from evsys.util.atomic import write_text_atomic

Item = VerifiedTask | PromptTask | RepoTask | str | Mapping[str, Any]
DEFAULT_AGENT = "loop"
TASKS_DIR = "tasks"
P = ParamSpec("P")
Scoring = tuple[AdvantageMethod, IntegrityPolicy]  # how a group's samples are scored


class BorrowedModelClient:
    """A caller's model client lent to a job, as the job's `ModelClient`: its clean-up never closes it."""

    def __init__(self, client: ChatCompleter) -> None:
        self.client = client
        self.model = str(getattr(client, "model", "") or type(client).__name__)  # optional on a lent client

    async def complete(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSchema] | None = None,
        params: SamplingParams | None = None,
    ) -> Completion:
        """Forward to the lent client."""
        return await self.client.complete(messages, tools=tools, params=params)

    async def aclose(self) -> None:
        """Nothing: the lender closes its own client."""


def _as_task(item: Item, index: int, outcome_reward: bool) -> VerifiedTask | PromptTask:
    """One input item as a Python task; strings become PromptTasks (generation only)."""
    if isinstance(item, str):
        if outcome_reward:
            raise ValueError(
                f"items[{index}] is a plain prompt, which has no verifier: pass outcome_reward=False "
                "or give a VerifiedTask"
            )
        return PromptTask(id=f"prompt-{index}", prompt=item)
    if isinstance(item, Mapping):
        row = item if "id" in item else {**item, "id": f"item-{index}"}
        item = load_python_tasks([row])[0]
    if not isinstance(item, VerifiedTask | PromptTask):
        raise TypeError(
            f"items[{index}] is a {type(item).__name__}; expected VerifiedTask, PromptTask or str"
        )
    if not outcome_reward:  # generation only: the verifier is never called
        fields = item.model_dump(exclude={"kind", "verifier"})
        return PromptTask(**fields)
    if isinstance(item, PromptTask):
        raise ValueError(f"items[{index}] ({item.id!r}) is a PromptTask: it has no verifier to give a reward")
    return item


def prepare_tasks(
    items: Sequence[Item], *, outcome_reward: bool, sandbox: bool | None
) -> list[VerifiedTask | PromptTask]:
    """The items as Python tasks with unique ids (errors name the item's index)."""
    if isinstance(items, str | Mapping):
        raise TypeError("items must be a list of tasks or prompts, not a single one")
    tasks = [_as_task(item, i, outcome_reward) for i, item in enumerate(items)]
    if not tasks:
        raise ValueError("items is empty: nothing to roll out")
    if sandbox is not None:
        tasks = [t.model_copy(update={"sandbox": sandbox}) for t in tasks]
    seen: dict[str, int] = {}
    for index, task in enumerate(tasks):
        if task.id in seen:
            raise ValueError(
                f"items[{index}]: duplicate id {task.id!r} (first used by items[{seen[task.id]}])"
            )
        seen[task.id] = index
    return tasks


def save_tasks(tasks: Sequence[VerifiedTask | PromptTask], root: Path) -> Path:
    """Write the tasks as a Python-task dataset (`dataset.toml` + `tasks.jsonl`) so the job can be resumed."""
    if (root.parent / "config.json").exists():
        raise ValueError(f"{root.parent} already exists: choose another job_name")
    root.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(t.model_dump(include=set(TASK_FIELDS), exclude_none=True)) + "\n" for t in tasks]
    write_text_atomic(root / "tasks.jsonl", "".join(lines))
    write_text_atomic(root / "dataset.toml", '[dataset]\nname = "rollouts"\ndata = "tasks.jsonl"\n')
    return root


def _agent_spec(
    agent: str | None, model: str | ChatCompleter | None, kwargs: dict[str, Any]
) -> tuple[AgentSpec, ModelClientFactory | None]:
    """The agent spec and, for a client object passed as `model`, the factory that lends it to the job. A
    model-free agent (`oracle`, `nop`) needs no model; every other agent does."""
    name = agent or DEFAULT_AGENT
    if model is None:
        if agent_plugin(name).model_use != "none":
            raise ValueError(
                f"agent {name!r} talks to a model: pass model= (a model string such as 'local', or a client)"
            )
        return AgentSpec(name=name, kwargs={}), None
    if isinstance(model, str):
        return AgentSpec(name=name, model=model, kwargs=kwargs), None
    if not isinstance(model, ChatCompleter):
        raise TypeError("model must be a model string (e.g. 'local') or a model client with complete()")
    borrowed = BorrowedModelClient(model)
    return AgentSpec(name=name, model=borrowed.model, kwargs=kwargs), lambda _spec: borrowed


def _job_name() -> str:
    return f"rollouts-{datetime.now().strftime('%Y-%m-%d__%H-%M-%S')}-{secrets.token_hex(3)}"


def _loop_kwargs(
    max_turns: int, max_tokens: int, temperature: float, system_prompt: str | None, seed: int | None
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"max_turns": max_turns, "max_tokens": max_tokens, "temperature": temperature}
    if system_prompt is not None:
        kwargs["system_prompt"] = system_prompt
    if seed is not None:
        kwargs["seed"] = seed
    return kwargs


@dataclass
class RolloutPlan:
    """A `run_rollouts` job ready to run, and how its result becomes the groups (`collect`, in the items'
    order for tasks in memory, the plan's for tasks on disk)."""

    job: Job
    collect: Callable[[JobResult], list[TrajectoryGroup]]


async def plan_rollouts(
    items: Sequence[Item] | Path | str,
    *,
    outcome_reward: bool = True,
    model: str | ChatCompleter | None = None,
    num_samples: int = 1,
    max_turns: int = 1,
    max_tokens: int = 512,
    temperature: float = 1.0,
    system_prompt: str | None = None,
    agent: str | None = None,
    n_concurrent: int = 4,
    max_retries: int = 2,
    sandbox: bool | None = None,
    jobs_dir: Path | str | None = None,
    job_name: str | None = None,
    advantage: AdvantageMethod = "mean",
    executor: str = "local",
    executor_options: BaseModel | Mapping[str, Any] | None = None,
    warm_sandboxes: int = 0,
    sandboxes: SandboxPool | None = None,
    integrity: IntegrityPolicy | str = IntegrityPolicy.ZERO,
    by_task: bool = False,
    verifier_timeout_sec: float | None = None,
    seed: int | None = None,
) -> RolloutPlan:
    """The job that rolls out every item `num_samples` times, not started yet (`run_rollouts` runs it).

    `items`: see the module docstring. `model` is a model string (`local`, `openai:gpt-4.1`, ...) or a model
    client object (lent, never closed); an agent that uses no model (`agent="oracle"`, `"nop"`) needs none.
    `outcome_reward=False` turns every item into a generation-only `PromptTask` (reward 0, no verifier call).
    `sandbox` overrides the tasks' own choice (True = agentic, in a local sandbox). Retryable failures
    (model/sandbox/agent errors) are retried `max_retries` times; a trial that still fails stays in its group
    with its error. The job directory is `<jobs_dir>/<job_name>` (default `jobs/`).
    `executor` names where the trials run (evsys.engine.executors: `local`, `processes`, `ray`),
    `executor_options` its settings (for `ray`: `{"address": "auto"}`, see RayOptions; for `processes`:
    `{"workers": 8}`, see ProcessOptions); a lent client works in-process only, so
    another executor needs a model string (each worker builds its own client from it). `warm_sandboxes=N`
    keeps N started sandboxes per environment ready while the job runs (evsys.sandbox.pool). `sandboxes`: a
    pool the caller owns (`SandboxPool.for_backend("local", max_idle=N)`), passed to every step of a training
    run so each batch starts on the sandboxes the last one released, reset; never closed here (local
    executor only; docs/scale.md). `integrity` says what a trial with integrity findings gets
    (evsys.trajectory.integrity): "zero" (reward 0, the default), "screen" (marked `screened`, left out of
    its group's baseline, advantage 0) or "flag" (recorded only). `by_task` starts the trials task by task, so
    each task's group finishes early (`stream_rollouts`). `verifier_timeout_sec` bounds every task's verifier
    (test script, function, rubric, LLM judge) in place of its own limit (a Python task's default:
    `PYTHON_VERIFIER_TIMEOUT_SEC`, 120 s; a task directory's `[verifier] timeout_sec`); a verifier past it
    makes that sample `verifier_timeout`, and the others go on. `seed` makes sampling reproducible: sample i
    (attempt i + 1) of every item samples with its own seed derived from it (evsys.engine.trial.agent
    `attempt_seed`), so a group's samples differ and the same (seed, sample) gives the same text again.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    if advantage not in ADVANTAGE_METHODS:
        raise ValueError(f"advantage must be one of {', '.join(ADVANTAGE_METHODS)}, got {advantage!r}")
    scoring = (advantage, integrity_policy(integrity))
    kwargs = _loop_kwargs(max_turns, max_tokens, temperature, system_prompt, seed)
    spec, factory = _agent_spec(agent, model, kwargs)
    # validated once, as the executor's options_model; an unknown name is refused
    where = ExecutorSpec.model_validate({"name": executor, "options": executor_options})
    if factory is not None and not executor_class(executor).in_process:
        raise ValueError(
            f"executor={executor!r} runs trials in other processes: pass the model as a string "
            "(e.g. 'vllm:Qwen/Qwen3-8B' with its base URL), not a client object"
        )
    name = job_name or _job_name()
    root = Path(jobs_dir) if jobs_dir is not None else Path("jobs")
    source = await resolve_tasks(items)
    settings: dict[str, Any] = {
        "n_attempts": num_samples,
        "n_concurrent": n_concurrent,
        "max_retries": max_retries,
    }
    settings["warm_sandboxes"] = warm_sandboxes
    settings["verifier_timeout_sec"] = verifier_timeout_sec
    disk = DiskJob(spec, factory, root / name, settings, where, sandboxes, by_task)
    if source.paths:
        return await plan_dataset_rollouts(source.paths, disk, scoring)
    if source.rows and source.memory:
        raise ValueError("items: give repository rows or Python tasks, not a mix (one job runs one kind)")
    if source.rows:
        return await plan_repo_rollouts(source.rows, disk, scoring)
    tasks = prepare_tasks(source.memory, outcome_reward=outcome_reward, sandbox=sandbox)
    if spec.name == OracleAgent.name and (problem := missing_references(tasks, "items")):
        raise ValueError(f"agent='oracle': {problem}")
    dataset = await asyncio.to_thread(save_tasks, tasks, root / name / TASKS_DIR)
    config = JobConfig(
        datasets=[dataset],
        agents=[spec],
        job_name=name,
        jobs_dir=root,
        n_attempts=num_samples,
        n_concurrent=n_concurrent,
        max_retries=max_retries,
        executor=where,
        **{k: settings[k] for k in ("warm_sandboxes", "verifier_timeout_sec")},
    )
    job = Job(
        config,
        model_client_factory=factory,
        python_tasks=tasks,
        keep_trajectories=True,
        sandboxes=sandboxes,
        by_task=by_task,
    )
    return RolloutPlan(job, lambda result: collect_groups(job, result, tasks, *scoring))


def collect_groups(
    job: Job,
    result: JobResult,
    tasks: Sequence[VerifiedTask | PromptTask],
    method: AdvantageMethod,
    integrity: IntegrityPolicy = IntegrityPolicy.ZERO,
) -> list[TrajectoryGroup]:
    """Group the job's trials per task, in the tasks' order, with advantages computed per group (rewards
    under the `integrity` policy)."""
    groups = {
        task.id: TrajectoryGroup(
            group_id=f"{job.config.job_name}/{task.id}", task_id=task.id, prompt=task.prompt
        )
        for task in tasks
    }
    _fill_groups(
        job,
        result,
        groups,
        lambda p: p.python_task.id if p.python_task is not None else None,
        (method, integrity),
    )
    return [groups[task.id] for task in tasks]


def _running(
    plan: Callable[P, Awaitable[RolloutPlan]],
) -> Callable[P, Coroutine[Any, Any, list[TrajectoryGroup]]]:
    """`plan`, then the job run and its groups collected: `run_rollouts` takes `plan_rollouts`' arguments."""

    @functools.wraps(plan)
    async def run(*args: P.args, **kwargs: P.kwargs) -> list[TrajectoryGroup]:
        rollout = await plan(*args, **kwargs)
        result = await rollout.job.run()
        return await asyncio.to_thread(rollout.collect, result)

    return run


run_rollouts = _running(plan_rollouts)
run_rollouts.__name__ = run_rollouts.__qualname__ = "run_rollouts"
run_rollouts.__doc__ = """Roll out every item `num_samples` times; one `TrajectoryGroup` per item, in input
order (tasks in memory), or per planned task (tasks on disk). Arguments: `plan_rollouts`."""


@dataclass
class DiskJob:
    """A `run_rollouts` job over tasks on disk: its agent, the lent client's factory, its directory and
    settings, where it runs and the caller's sandbox pool."""

    spec: AgentSpec
    factory: ModelClientFactory | None
    job_dir: Path
    settings: dict[str, Any]
    executor: ExecutorSpec
    sandboxes: SandboxPool | None = None
    by_task: bool = False

    def job(self, datasets: list[Path]) -> Job:
        """The job over `datasets` (refused when the job directory holds a job already)."""
        if (self.job_dir / "config.json").exists():
            raise ValueError(f"{self.job_dir} already exists: choose another job_name")
        config = JobConfig(
            datasets=datasets,
            agents=[self.spec],
            job_name=self.job_dir.name,
            jobs_dir=self.job_dir.parent,
            executor=self.executor,
            **self.settings,
        )
        return Job(
            config,
            model_client_factory=self.factory,
            keep_trajectories=True,
            sandboxes=self.sandboxes,
            by_task=self.by_task,
        )


async def plan_repo_rollouts(rows: list[RepoTask], disk: DiskJob, scoring: Scoring) -> RolloutPlan:
    """`run_rollouts` over repository tasks: the rows are saved as `tasks/rows.jsonl` in the job (so it can be
    resumed), run as repository task directories, and grouped per instance in the rows' order."""
    seen: set[str] = set()
    for index, row in enumerate(rows):
        if row.instance_id in seen:
            raise ValueError(f"items[{index}]: duplicate instance_id {row.instance_id!r}")
        seen.add(row.instance_id)
    if (disk.job_dir / "config.json").exists():
        raise ValueError(f"{disk.job_dir} already exists: choose another job_name")
    data = "".join(row.model_dump_json(exclude_none=True) + "\n" for row in rows)
    dataset = disk.job_dir / TASKS_DIR / "rows.jsonl"
    await asyncio.to_thread(write_text_atomic, dataset, data)
    job = disk.job([dataset])
    return RolloutPlan(job, lambda result: _repo_groups(job, result, rows, scoring))


async def plan_dataset_rollouts(paths: list[Path], disk: DiskJob, scoring: Scoring) -> RolloutPlan:
    """`run_rollouts` over tasks on disk (task directories, datasets, rows files): the job lists the paths
    as `evsys run` would (so `Job.resume` finishes it), one group per planned task, in the plan's order."""
    job = disk.job([path.resolve() for path in paths])
    return RolloutPlan(job, lambda result: _planned_groups(job, result, scoring))


def _planned_groups(job: Job, result: JobResult, scoring: Scoring) -> list[TrajectoryGroup]:
    groups: dict[str, TrajectoryGroup] = {}
    for planned in job.planned:
        name = planned.config.task_name
        if name not in groups:
            prompt = planned.task.instruction if planned.task is not None else ""
            groups[name] = TrajectoryGroup(
                group_id=f"{job.config.job_name}/{name}", task_id=name, prompt=prompt
            )
    _fill_groups(job, result, groups, lambda p: p.config.task_name, scoring)
    return list(groups.values())


def _repo_groups(
    job: Job, result: JobResult, rows: list[RepoTask], scoring: Scoring
) -> list[TrajectoryGroup]:
    groups = {
        row.instance_id: TrajectoryGroup(
            group_id=f"{job.config.job_name}/{row.instance_id}",
            task_id=row.instance_id,
            prompt=row.problem_statement,
        )
        for row in rows
    }
    _fill_groups(job, result, groups, lambda p: p.config.task_name, scoring)
    return [groups[row.instance_id] for row in rows]


def _fill_groups(
    job: Job,
    result: JobResult,
    groups: dict[str, TrajectoryGroup],
    task_id_of: Callable[[PlannedTrial], str | None],
    scoring: Scoring,
) -> None:
    """Put each planned trial's rollout in its task's group (`task_id_of`; trials of no group are skipped; a
    trial the job never ran, e.g. after a cancel, stays as an error rollout), then sort each group by attempt
    and compute its advantages (`scoring`: the advantage method and the integrity policy)."""
    method, integrity = scoring
    by_name = {r.trial_name: r for r in result.trials}
    for planned in job.planned:
        task_id = task_id_of(planned)
        if task_id not in groups:
            continue
        trial = by_name.get(planned.config.trial_name)
        if trial is None:
            groups[task_id].trajectories.append(_not_run(planned, task_id))
            continue
        trajectory = job.store.trajectory(trial.trial_name)  # in memory; read only after a resume
        groups[task_id].trajectories.append(rollout_from_trial(trial, trajectory, task_id, integrity))
    for group in groups.values():
        group.trajectories.sort(key=lambda t: t.attempt)
        finalize_group(group, method)


def _not_run(planned: PlannedTrial, task_id: str) -> RolloutTrajectory:
    return RolloutTrajectory(
        trial_name=planned.config.trial_name,
        task_id=task_id,
        attempt=planned.config.attempt,
        error=RolloutError(
            cause=FailureCause.CANCELLED, message="the job was cancelled before this sample ran"
        ),
    )
