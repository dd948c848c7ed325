"""Job directories read back for people: every job under a directory, one job's trials and metrics, two jobs
compared. Read-only; every file goes through `SafeDir`, so nothing outside a job directory is ever read.

The metrics are recomputed from the trials' own `result.json` files with the engine's `compute_metrics`, so a
job that is still running (or was killed before its last `result.json`) shows what it has so far, with the
same definitions `evsys run` prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError

from evsys.engine.config import JobConfig
from evsys.engine.metrics import compute_metrics, job_result, mean_pass_at_k
from evsys.records import FailureCause, GroupMetrics, JobResult, TrialResult
from evsys.viewer.files import SafeDir, UnsafePathError, check_name

CONFIG = "config.json"
RESULT = "result.json"
JobState = Literal["running/stopped", "done", "cancelled", "incomplete", "unreadable"]


class BadTrial(BaseModel):
    """A trial directory whose result.json is missing (still running) or unreadable (the message says why)."""

    name: str
    problem: str


class LoadedJob(BaseModel):
    """One job as read from disk: its config and result (when readable), every trial, metrics recomputed."""

    name: str
    path: str
    config: JobConfig | None = None
    config_error: str | None = None
    result_error: str | None = Field(None, description="Why the job's result.json could not be read.")
    started_at: str | None = None
    finished_at: str | None = None
    complete: bool = False
    n_planned: int = 0
    trials: list[TrialResult] = Field(default_factory=list)
    pending: list[BadTrial] = Field(default_factory=list, description="Trial dirs with no valid result.")
    metrics: list[GroupMetrics] = Field(default_factory=list)

    @property
    def n_attempts(self) -> int:
        """Attempts per task from the config (or the highest attempt seen)."""
        if self.config is not None:
            return self.config.n_attempts
        return max((t.attempt for t in self.trials), default=1)

    @property
    def n_errors(self) -> int:
        """Trials that ended with a failure cause."""
        return sum(1 for t in self.trials if t.failure is not None)

    @property
    def running(self) -> bool:
        """True while the job has not written a finished result.json (running, or killed)."""
        return self.finished_at is None

    @property
    def state(self) -> JobState:
        """What became of the job: `running/stopped` (no finished result.json: running, or killed), `done`
        (only when result.json says complete), `cancelled` (finished with cancelled trials) or `incomplete`
        (finished without a result for every planned trial); `unreadable` when result.json exists but
        cannot be read (`result_error` says why)."""
        if self.result_error:
            return "unreadable"
        if self.running:
            return "running/stopped"
        if self.complete:
            return "done"
        if any(t.cause == FailureCause.CANCELLED for t in self.trials):
            return "cancelled"
        return "incomplete"

    def as_job_result(self) -> JobResult:
        """The job as a `JobResult` (what `evsys run` prints its summary from), computed from the trials as
        `evsys run` computes it; the timestamps and `complete` as result.json records them."""
        result = job_result(
            self.trials,
            job_name=self.name,
            job_dir=self.path,
            started_at=self.started_at or "",
            n_planned=self.n_planned or len(self.trials) + len(self.pending),
            n_attempts=self.n_attempts,
        )
        return result.model_copy(update={"finished_at": self.finished_at, "complete": self.complete})


class JobListing(BaseModel):
    """One line of `evsys jobs list` and the viewer's job list."""

    name: str
    started_at: str | None
    finished_at: str | None
    running: bool
    state: JobState
    agents: list[str]
    models: list[str]
    datasets: list[str] = Field(default_factory=list)
    n_trials: int
    n_planned: int
    n_errors: int
    mean_reward: float | None
    pass_at_k: dict[int, float] | None
    problem: str | None = None


class TaskDelta(BaseModel):
    """Mean reward of one (task, agent, model) in two jobs and b - a (None where one side lacks it)."""

    task: str
    agent: str
    model: str | None
    a: float | None
    b: float | None
    delta: float | None
    n_a: int
    n_b: int


def is_job_dir(path: Path) -> bool:
    """True when `path` is a directory holding a job's config.json (not a symbolic link)."""
    return path.is_dir() and SafeDir(path).kind(CONFIG) == "file"


def load_job(job_dir: Path) -> LoadedJob:
    """Read a job directory: config, result.json's timestamps, every trial's result.json, metrics."""
    job_dir = Path(job_dir)
    root = SafeDir(job_dir)
    job = LoadedJob(name=job_dir.name, path=str(job_dir))
    try:
        job.config = JobConfig.model_validate_json(root.read_json_bytes(CONFIG))
    except (OSError, UnsafePathError, ValidationError, ValueError) as exc:
        job.config_error = f"{job_dir / CONFIG}: {_short(exc)}"
    _read_job_result(root, job)
    for entry in root.list_dir():
        if entry.kind != "dir" or entry.name.startswith("."):
            continue
        try:
            trial = TrialResult.model_validate_json(root.read_json_bytes(f"{entry.name}/{RESULT}"))
        except FileNotFoundError:
            if root.kind(f"{entry.name}/{CONFIG}") == "file":
                job.pending.append(BadTrial(name=entry.name, problem="no result.json yet"))
            continue
        except (OSError, UnsafePathError, ValidationError, ValueError) as exc:
            job.pending.append(
                BadTrial(name=entry.name, problem=f"{entry.name}/{RESULT}: cannot be read: {_short(exc)}")
            )
            continue
        job.trials.append(trial)
    job.trials.sort(key=lambda t: (t.task_name, t.agent, t.model or "", t.attempt, t.trial_name))
    job.metrics = compute_metrics(job.trials, job.n_attempts)
    return job


def _read_job_result(root: SafeDir, job: LoadedJob) -> None:
    try:
        result = JobResult.model_validate_json(root.read_json_bytes(RESULT))
    except FileNotFoundError:  # not written yet: the job is starting, or was killed before its first write
        return
    except (OSError, UnsafePathError, ValidationError, ValueError) as exc:
        job.result_error = f"{Path(job.path) / RESULT}: cannot be read: {_short(exc)}"
        return
    job.started_at = result.started_at
    job.finished_at = result.finished_at
    job.complete = result.complete
    job.n_planned = result.n_planned


def job_names(jobs_dir: Path) -> list[str]:
    """The names of the job directories directly under `jobs_dir` (real directories with a config.json)."""
    root = SafeDir(jobs_dir)
    return [
        entry.name
        for entry in root.list_dir()
        if entry.kind == "dir" and root.kind(f"{entry.name}/{CONFIG}") == "file"
    ]


def list_jobs(jobs_dir: Path) -> list[JobListing]:
    """Every job directory directly under `jobs_dir`, newest first."""
    listings = [job_listing(load_job(Path(jobs_dir) / name)) for name in job_names(jobs_dir)]
    return sorted(listings, key=lambda j: (j.started_at or "", j.name), reverse=True)


# (mtime ns, size, inode) of the job directory and of its result.json (None: missing)
ChangeStamp = tuple[tuple[int, int, int] | None, ...]


def change_stamp(job_dir: Path) -> ChangeStamp:
    """What changes when a job makes progress: its directory (trial dirs added) and its result.json
    (rewritten as trials finish and once at the end)."""
    stamps: list[tuple[int, int, int] | None] = []
    for path in (job_dir, job_dir / RESULT):
        try:
            st = path.stat()
        except OSError:
            stamps.append(None)
            continue
        stamps.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(stamps)


def job_listing(job: LoadedJob) -> JobListing:
    """The one-line summary of a loaded job."""
    scored = [t for t in job.trials if t.cause != FailureCause.CANCELLED]
    agents = sorted({t.agent for t in job.trials}) or _config_agents(job)
    return JobListing(
        name=job.name,
        started_at=job.started_at,
        finished_at=job.finished_at,
        running=job.running,
        state=job.state,
        agents=agents,
        models=sorted({t.model for t in job.trials if t.model}) or _config_models(job),
        datasets=sorted({t.dataset for t in job.trials}) or _config_datasets(job),
        n_trials=len(job.trials),
        n_planned=job.n_planned,
        n_errors=job.n_errors,
        mean_reward=_mean([t.reward or 0.0 for t in scored]) if scored else None,
        pass_at_k=mean_pass_at_k(scored, job.n_attempts),
        problem=job.config_error or job.result_error,
    )


def _config_datasets(job: LoadedJob) -> list[str]:
    return sorted({Path(p).name for p in job.config.datasets}) if job.config else []


def _config_agents(job: LoadedJob) -> list[str]:
    return [a.name for a in job.config.agents] if job.config else []


def _config_models(job: LoadedJob) -> list[str]:
    return sorted({a.model for a in job.config.agents if a.model}) if job.config else []


def diff_jobs(a: LoadedJob, b: LoadedJob) -> list[TaskDelta]:
    """Per task: mean reward over attempts in each job and b - a.

    When each job ran one (agent, model), tasks are matched by name alone (two models or two agents on the
    same tasks is the usual comparison) and the row names both; otherwise rows are per (task, agent, model).
    """
    means_a, means_b = _task_means(a), _task_means(b)
    groups_a, groups_b = {k[1:] for k in means_a}, {k[1:] for k in means_b}
    label: tuple[str, str | None] | None = None
    if len(groups_a) == 1 and len(groups_b) == 1:
        (agent_a, model_a), (agent_b, model_b) = groups_a.pop(), groups_b.pop()
        label = (_pair(agent_a, agent_b), _pair(model_a, model_b))
        means_a = {(k[0], "", None): v for k, v in means_a.items()}
        means_b = {(k[0], "", None): v for k, v in means_b.items()}
    rows = []
    for key in sorted(set(means_a) | set(means_b), key=lambda k: (k[0], k[1], k[2] or "")):
        ra, rb = means_a.get(key, []), means_b.get(key, [])
        va = _mean(ra) if ra else None
        vb = _mean(rb) if rb else None
        agent, model = label or key[1:]
        rows.append(
            TaskDelta(
                task=key[0], agent=agent, model=model, a=va, b=vb,
                delta=vb - va if va is not None and vb is not None else None, n_a=len(ra), n_b=len(rb),
            )
        )  # fmt: skip
    return rows


_Name = TypeVar("_Name", str, str | None)


def _pair(a: _Name, b: _Name) -> _Name:
    return a if a == b else f"{a or '-'} -> {b or '-'}"


def _task_means(job: LoadedJob) -> dict[tuple[str, str, str | None], list[float]]:
    cells: dict[tuple[str, str, str | None], list[float]] = {}
    for trial in job.trials:
        if trial.cause != FailureCause.CANCELLED:
            cells.setdefault((trial.task_name, trial.agent, trial.model), []).append(trial.reward or 0.0)
    return cells


def resolve_job(jobs_dir: Path, name: str) -> Path:
    """The directory of job `name` under `jobs_dir`: a plain name of a real directory with a config.json."""
    check_name(name)
    if SafeDir(jobs_dir).kind(f"{name}/{CONFIG}") != "file":
        raise UnsafePathError(f"no job named {name!r} in {jobs_dir}")
    return Path(jobs_dir) / name


MAX_GROUP_TRIALS = 5


class ErrorGroup(BaseModel):
    """Failed trials sharing a cause and a first message line: how many, and a few of their names."""

    cause: str
    message: str
    count: int
    trials: list[str] = Field(description=f"Up to {MAX_GROUP_TRIALS} of the trials, in name order.")


def error_summary(trials: list[TrialResult]) -> list[ErrorGroup]:
    """Failed trials grouped by cause and the first line of their message, most frequent first."""
    groups: dict[tuple[str, str], list[str]] = {}
    for trial in trials:
        if trial.failure is not None:
            key = (trial.failure.cause.value, first_line(trial.failure.message))
            groups.setdefault(key, []).append(trial.trial_name)
    summary = [
        ErrorGroup(cause=cause, message=message, count=len(names), trials=sorted(names)[:MAX_GROUP_TRIALS])
        for (cause, message), names in groups.items()
    ]
    return sorted(summary, key=lambda g: (-g.count, g.cause, g.message))


def first_line(text: str, limit: int = 160) -> str:
    """The first non-empty line of `text`, cut at `limit` characters."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _short(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        return f"{where}: {first['msg']}"
    return str(exc) or type(exc).__name__
