"""Planning a job: load the datasets and expand attempts x tasks x agents into named trials.

Trial names are deterministic — `<task>__<agent-slug>__<attempt>`, sanitised for file names and made unique —
so a resumed job matches the trials of the first run. Tasks that fail to load become trials that fail with
`task_invalid`; tasks with docker-compose sidecars fail with `environment_unsupported` unless the job skips
builds (a task's image is built when its trial runs, see engine/trial/images.py). Either way the other trials
are unaffected.

Python tasks (a directory with a `dataset.toml`, or tasks handed over in memory by `run_rollouts`) are planned
in their input order; a dataset with bad rows fails the plan, naming every row. Every planned trial carries a
`TrialSpec` any executor can ship: a Python task's registered verifier is referenced by its importable name,
and a dataset's verifier module is listed for a worker to import.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evsys.engine.config import AgentSpec, JobConfig, StepTimeouts, TrialConfig, selects_task, slugify
from evsys.engine.spec import PlannedTrial, TaskRef, TrialSpec, python_task_as_task
from evsys.model.registry import provider_defaults
from evsys.records import FailureCause, TrialFailure
from evsys.repo.cache import cache_root
from evsys.repo.materialise import materialised_dir
from evsys.repo.rows import RepoRowsError, is_repo_dataset, load_repo_rows
from evsys.task.harbor_dataset import DatasetManifestError
from evsys.task.loader import TaskLoadError, TaskSet, load_task, load_tasks
from evsys.task.models import Task
from evsys.task.python import (
    PromptTask,
    PythonDatasetConfig,
    PythonTaskLoadError,
    VerifiedTask,
    is_python_dataset,
    load_python_tasks,
    read_dataset_config,
)
from evsys.task.select import metadata_selected, short_name
from evsys.verify.functions import verifier_reference

PythonTaskItem = VerifiedTask | PromptTask


class PlanError(ValueError):
    """The job cannot be planned (no dataset, no task matches the filter)."""


def _load_error_message(error: TaskLoadError) -> str:
    lines = []
    for problem in error.errors:
        where = f"{error.path}/{problem.file}" + (f":{problem.field}" if problem.field else "")
        lines.append(f"{where}: {problem.message}")
    return "; ".join(lines) or f"{error.path}: invalid task"


def _selected(name: str, config: JobConfig) -> bool:
    return selects_task(config, name)


def _wanted(name: str, task: Task | None, config: JobConfig) -> bool:
    """Selected by the job's name globs (`--task`, `--exclude-task`) and metadata filters (`--filter`); a task
    that did not load has no metadata, so a filter never selects it."""
    if not _selected(name, config):
        return False
    filters = config.metadata_filters
    return not filters or (task is not None and metadata_selected(task.config.metadata, filters))


def invalid_task_lines(taskset: TaskSet, config: JobConfig) -> list[str]:
    """One `path/file:field: message` line per invalid task of `taskset` the job's task patterns select."""
    return [_load_error_message(e) for e in taskset.errors if _selected(e.task_name, config)]


def task_warning_lines(taskset: TaskSet, config: JobConfig) -> list[str]:
    """One `path: warning` line per warning of the valid tasks the job's task patterns select."""
    return [f"{t.path}: {w}" for t in taskset.tasks if _selected(t.name, config) for w in t.warnings]


Entry = tuple[str, Path, Task | None, TrialFailure | None, TaskRef]


def _portable(task: PythonTaskItem) -> PythonTaskItem:
    """The task with its verifier named so another process can load it (see `verifier_reference`)."""
    if not isinstance(task, VerifiedTask):
        return task
    reference = verifier_reference(task.verifier)
    return task if reference == task.verifier else task.model_copy(update={"verifier": reference})


def _python_entries(
    path: Path, tasks: Sequence[PythonTaskItem], config: JobConfig, imports: list[str] | None = None
) -> list[Entry]:
    """Entries of Python tasks, in their input order (the order run_rollouts returns groups in)."""
    entries: list[Entry] = []
    for task in tasks:
        as_task = python_task_as_task(task, path)
        if _wanted(task.id, as_task, config):
            entries.append((task.id, path, as_task, None, TaskRef.python(_portable(task), path, imports)))
    return entries


def _dataset_imports(path: Path) -> list[str]:
    """The dataset's verifier module (absolute when it is a file), for workers in other processes."""
    toml = path / "dataset.toml" if path.is_dir() else path.parent / "dataset.toml"
    if not toml.is_file():
        return []
    module = read_dataset_config(toml).verifier_module
    if not module:
        return []
    is_file = module.endswith(".py") or "/" in module
    return [str((toml.parent / module).resolve()) if is_file else module]


def _repo_entries(path: Path, config: JobConfig) -> list[Entry]:
    """Entries of SWE-bench-style rows: each valid row as a materialised task directory (evsys.repo), each
    bad row as a `task_invalid` trial naming its row and field."""
    try:
        rows = load_repo_rows(path)
    except RepoRowsError as exc:
        raise PlanError(str(exc)) from None
    root = cache_root() / "tasks"
    entries: list[Entry] = []
    for row in rows.tasks:
        if not _selected(row.instance_id, config):
            continue
        task_dir = materialised_dir(row, root)
        try:
            task, failure = load_task(task_dir), None
        except TaskLoadError as exc:
            message = _load_error_message(exc)
            task, failure = None, TrialFailure(cause=FailureCause.TASK_INVALID, message=message)
        if _wanted(row.instance_id, task, config):
            entries.append((row.instance_id, task_dir, task, failure, TaskRef.directory(task_dir)))
    for error in rows.errors:
        name = error.instance_id or f"row-{error.row}"
        if _wanted(name, None, config):
            failure = TrialFailure(cause=FailureCause.TASK_INVALID, message=str(error))
            entries.append((name, path.resolve(), None, failure, TaskRef.directory(path.resolve())))
    return entries


def _dataset_entries(path: Path, config: JobConfig, loaded: Mapping[Path, TaskSet]) -> list[Entry]:
    if is_repo_dataset(path):
        return _repo_entries(path, config)
    try:
        python_dataset = is_python_dataset(path)
    except DatasetManifestError as exc:
        raise PlanError(str(exc)) from None
    if python_dataset:
        try:
            tasks = load_python_tasks(path)
        except PythonTaskLoadError as exc:
            raise PlanError(str(exc)) from None
        return _python_entries(path.resolve(), tasks, config, _dataset_imports(path))
    taskset = loaded.get(path.resolve()) or load_tasks(path)
    entries: list[Entry] = []
    for task in taskset.tasks:
        if not _wanted(task.name, task, config):
            continue
        entries.append((task.name, task.path, task, None, TaskRef.directory(task.path)))
    for error in taskset.errors:
        if _wanted(error.task_name, None, config):
            failure = TrialFailure(cause=FailureCause.TASK_INVALID, message=_load_error_message(error))
            ref = TaskRef.directory(error.path.resolve())
            entries.append((error.task_name, error.path.resolve(), None, failure, ref))
    return sorted(entries, key=lambda e: e[0])


def _manifest(path: Path) -> PythonDatasetConfig | None:
    """A Python dataset's dataset.toml (None for any other dataset, or one that does not parse)."""
    try:
        return read_dataset_config(path) if is_python_dataset(path) else None
    except (DatasetManifestError, PythonTaskLoadError, OSError):
        return None


def dataset_label(path: Path) -> str:
    """The dataset column of a dataset's trials: a Python dataset's dataset.toml `name`, else the
    directory's name."""
    manifest = _manifest(path)
    return (manifest.name if manifest else None) or slugify(path.resolve().name)


def dataset_version(path: Path) -> str | None:
    """A Python dataset's dataset.toml `version` (None when it declares none)."""
    manifest = _manifest(path)
    return manifest.version if manifest else None


def _sample_tasks(
    datasets: list[tuple[str, list[Entry]]], config: JobConfig
) -> list[tuple[str, list[Entry]]]:
    """Keep `config.n_tasks` of the selected task names (all of them when there are no more), drawn with
    `config.task_sample_seed` from the sorted names: the same tasks on every run of the same config."""
    names = sorted({name for _, entries in datasets for name, *_ in entries})
    if config.n_tasks is None or config.n_tasks >= len(names):
        return datasets
    keep = set(random.Random(config.task_sample_seed).sample(names, config.n_tasks))
    return [(label, [e for e in entries if e[0] in keep]) for label, entries in datasets]


def _agent_slugs(agents: list[AgentSpec]) -> list[str]:
    slugs: list[str] = []
    for agent in agents:
        slug, n = agent.slug, 2
        while slug in slugs:
            slug, n = f"{agent.slug}-{n}", n + 1
        slugs.append(slug)
    return slugs


def _timeouts(task: Task | None, config: JobConfig, agent: AgentSpec) -> dict[str, Any]:
    """The trial's timeouts: the task's scaled by the job's multipliers (the only place they are scaled); the
    agent timeout also by the agent's model provider's `agent_timeout_scale` (4 for the local engine)."""
    if task is None:
        return {"log_limits": config.log_limits.resolved()}
    cfg = task.config
    agent_scale = config.agent_timeout_multiplier * provider_defaults(agent.model).agent_timeout_scale
    agent_timeout = cfg.agent.timeout_sec * agent_scale
    verifier_timeout = cfg.verifier.timeout_sec * config.verifier_timeout_multiplier
    fixed = config.verifier_timeout_sec  # the job's own limit beats the task's and its steps'
    verifier_timeout = fixed if fixed is not None else verifier_timeout
    build_timeout = cfg.environment.build_timeout_sec * config.setup_timeout_multiplier
    steps = {
        step.name: StepTimeouts(
            agent_timeout_sec=_step_timeout(step.config.agent.timeout_sec, agent_timeout, agent_scale),
            verifier_timeout_sec=fixed
            or _step_timeout(
                step.config.verifier.timeout_sec, verifier_timeout, config.verifier_timeout_multiplier
            ),
        )
        for step in task.steps
    }
    return {
        "agent_timeout_sec": agent_timeout,
        "verifier_timeout_sec": verifier_timeout,
        "setup_timeout_sec": cfg.agent.setup_timeout_sec * config.setup_timeout_multiplier,
        "sandbox_start_timeout_sec": build_timeout,
        "build_timeout_sec": build_timeout,
        "step_timeouts": steps,
        "log_limits": config.log_limits.over(cfg.environment.logs).resolved(),
    }


def _step_timeout(own: float | None, task_scaled: float, multiplier: float) -> float:
    """A step's own timeout scaled by the job's multiplier, else the task's (already scaled)."""
    return task_scaled if own is None else own * multiplier


def plan_trials(
    config: JobConfig,
    python_tasks: Sequence[PythonTaskItem] | None = None,
    tasksets: Mapping[Path, TaskSet] | None = None,
) -> list[PlannedTrial]:
    """Every trial of the job, attempt by attempt, in a deterministic order with unique names.

    With `python_tasks` (in memory, from run_rollouts) those are the job's tasks and the job's single
    dataset path only names them. `tasksets` holds task directories already loaded (by pre-flight), by
    resolved path; the others are loaded here.
    """
    if python_tasks is not None:
        path = Path(config.datasets[0])
        datasets = [(slugify(path.name), _python_entries(path, python_tasks, config))]
    else:
        datasets = [
            (dataset_label(Path(p)), _dataset_entries(Path(p), config, tasksets or {}))
            for p in config.datasets
        ]
    if not any(entries for _, entries in datasets):
        selection = [*config.task_names, *config.task_filters]
        wanted = f" matching {', '.join(selection)}" if selection else ""
        if config.exclude_task_names:
            wanted += f" (excluding {', '.join(config.exclude_task_names)})"
        raise PlanError(f"no tasks{wanted} in {', '.join(str(p) for p in config.datasets)}")
    datasets = _sample_tasks(datasets, config)
    task_slug = _task_slugger([name for _, entries in datasets for name, *_ in entries])
    slugs = _agent_slugs(config.agents)
    versions = {dataset_label(Path(p)): dataset_version(Path(p)) for p in config.datasets}
    used: set[str] = set()
    planned: list[PlannedTrial] = []
    for attempt in range(1, config.n_attempts + 1):
        for label, entries in datasets:
            for name, path, task, failure, ref in entries:
                for agent, agent_slug in zip(config.agents, slugs, strict=True):
                    trial_name = _unique(f"{task_slug(label, name)}__{agent_slug}__{attempt}", used)
                    trial_config = TrialConfig(
                        trial_name=trial_name,
                        task_name=name,
                        task_path=path,
                        dataset=label,
                        dataset_version=versions.get(label),
                        agent=agent,
                        attempt=attempt,
                        not_runnable=failure.message if failure else None,
                        network=config.network,
                        keep_state_mb=config.keep_state_mb,
                        **_timeouts(task, config, agent),
                    )
                    spec = TrialSpec.for_job(config, trial_config, ref, failure)
                    planned.append(PlannedTrial(spec=spec, task=task))
    return planned


def _task_slugger(names: list[str]) -> Callable[[str, str], str]:
    """How a task shows in its trials' names: its short name (`create-file` for `evsys/create-file`, as
    Harbor names trials) when no other task of the job has it, else its full name, else `dataset.name`."""
    shorts = Counter(short_name(name) for name in names)
    fulls = Counter(names)

    def slug(label: str, name: str) -> str:
        if shorts[short_name(name)] == 1:
            return slugify(short_name(name))
        return slugify(name if fulls[name] == 1 else f"{label}.{name}")

    return slug


def _unique(name: str, used: set[str]) -> str:
    candidate, n = name, 2
    while candidate in used:
        candidate, n = f"{name}-{n}", n + 1
    used.add(candidate)
    return candidate
