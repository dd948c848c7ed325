"""What a job produces: `TrialResult` per trial (its `result.json`) and `JobResult` (the job's `result.json`).

Every failed trial has exactly one primary `FailureCause` plus a message (a `TrialFailure`, see failure.py). A
trial whose agent timed out but whose verifier still produced a reward keeps the reward and records
`agent_timeout`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_serializer

from evsys.records.failure import FailureCause, TrialFailure
from evsys.records.integrity import IntegrityFinding
from evsys.records.trajectory import Usage, utc_now
from evsys.util.text import safe_text, safe_value

PHASES = (
    "environment_build",
    "sandbox_start",
    "agent_setup",
    "agent_run",
    "agent_early",  # overlaps sandbox_start (PhaseTimings.agent_early)
    "verifier",
    "logs_download",
    "sandbox_stop",
)


class TrialImage(BaseModel):
    """The environment image of a trial: its name, whether it was built, pulled or found cached, and which
    bases were synthesised offline instead of pulled."""

    ref: str
    source: str = Field(
        description="built, cached, pulled or stored (evsys's image storage), remote (the backend's own), or "
        "host: the host's root filesystem stood in for the base `ref`."
    )
    key: str | None = Field(
        None,
        description="The stored image's key; for source host, what stood in for the base: the host's release "
        "(`host:debian-12`), with the thin python layer `+python3.X` (`host:debian-12+python3.11`).",
    )
    synthesised_bases: list[str] = Field(default_factory=list)
    pull_error: str | None = Field(None, description="Why `docker_image` was built instead of pulled.")
    seconds: float = 0.0


class PhaseTimings(BaseModel):
    """Seconds spent in each phase of the trial (None when the phase did not run) and in total."""

    environment_build: float | None = None
    sandbox_start: float | None = None
    agent_setup: float | None = None
    agent_run: float | None = None
    agent_early: float | None = Field(
        None,
        description="Seconds of the agent's work begun while its sandbox started (the loop agent's first "
        "model call); it overlaps sandbox_start, so the phases add up to more than the total.",
    )
    verifier: float | None = None
    logs_download: float | None = None
    sandbox_stop: float | None = None
    total: float | None = None


class StepResult(BaseModel):
    """One step of a multi-step trial: its rewards (None when it was not scored) and what went wrong."""

    name: str
    rewards: dict[str, float] | None = None
    reward: float | None = None
    failure: TrialFailure | None = None
    agent_run: float | None = Field(None, description="Seconds the step's agent ran.")
    verifier: float | None = Field(None, description="Seconds the step's tests ran.")


class TrialResult(BaseModel):
    """The outcome of one trial, written to `<job>/<trial>/result.json`."""

    trial_name: str
    task_name: str
    task_path: str
    dataset: str
    dataset_version: str | None = Field(None, description="The dataset's version, when it declares one.")
    agent: str
    model: str | None = None
    attempt: int
    rewards: dict[str, float] | None = Field(None, description="All reward keys the verifier produced.")
    reward: float | None = Field(
        None, description="Primary reward: the 'reward' key, else the mean of the keys."
    )
    failure: TrialFailure | None = None
    retries: list[TrialFailure] = Field(default_factory=list, description="Failures of earlier tries.")
    usage: Usage = Field(default_factory=Usage)
    timing: PhaseTimings = Field(default_factory=PhaseTimings)
    started_at: str = Field(default_factory=utc_now)
    finished_at: str | None = None
    ran_on_host_image: bool = Field(
        False,
        description="The trial ran on the host's root filesystem in place of the base its task declares "
        "(`image.source` is then `host`): the host provides that base, or the job skipped builds.",
    )
    image: TrialImage | None = Field(None, description="The image the trial ran on, and how it was obtained.")
    tests_summary: str | None = Field(
        None,
        description="A repository task's per-test outcome in one line (from verifier/tests.json), e.g. "
        "'3 of 4 FAIL_TO_PASS pass; 2 of 2 PASS_TO_PASS pass; failing: ...'.",
    )
    sandbox_name: str | None = None
    sandbox_reused: bool = Field(
        False, description="The trial ran in a sandbox kept from an earlier trial of the job and reset."
    )
    agent_metadata: dict[str, Any] = Field(
        default_factory=dict, description="What the agent reported (AgentResult.metadata)."
    )
    warnings: list[str] = Field(
        default_factory=list, description="Non-fatal problems (e.g. a log copy failed)."
    )
    steps: list[StepResult] | None = Field(
        None, description="A multi-step task's steps in the order they ran (its files: steps/<name>/)."
    )
    integrity: list[IntegrityFinding] = Field(
        default_factory=list,
        description="What the trial tried against its grader (records/integrity.py); empty if honest.",
    )
    group: str | None = Field(
        None,
        description="The group exports compare this trial's reward with (besides its task): a served "
        "episode's client group or session; None for a job's own trials (grouped by task).",
    )
    exception_file: str | None = Field(
        None,
        description="`exception.txt` when the traceback of an exception (the agent's or evsys's own) "
        "was saved there, in the trial directory.",
    )

    # appended to as the trial runs, so made safe when written: names and text from inside the sandbox
    @field_serializer("warnings")
    def _safe_warnings(self, value: list[str]) -> list[str]:
        return [safe_text(w) for w in value]

    @field_serializer("agent_metadata")
    def _safe_metadata(self, value: dict[str, Any]) -> dict[str, Any]:
        return {safe_value(k): safe_value(v) for k, v in value.items()}

    @property
    def cause(self) -> FailureCause | None:
        """The failure cause, or None for a trial that succeeded."""
        return self.failure.cause if self.failure else None

    @property
    def ok(self) -> bool:
        """True when the trial ran to a reward with no failure."""
        return self.failure is None


class TimingStats(BaseModel):
    """Mean, median and max of one phase's duration over a group of trials (seconds)."""

    mean: float
    p50: float
    max: float
    n: int


class GroupMetrics(BaseModel):
    """Metrics of the trials sharing one (agent, model, dataset)."""

    agent: str
    model: str | None = None
    dataset: str
    n_trials: int
    n_errors: int
    errors_by_cause: dict[str, int] = Field(default_factory=dict)
    mean_reward: float
    reward_means: dict[str, float] = Field(default_factory=dict)
    pass_at_k: dict[int, float] | None = Field(
        None, description="Unbiased pass@k; None unless rewards are 0/1."
    )
    timing: dict[str, TimingStats] = Field(default_factory=dict)
    usage: Usage = Field(default_factory=Usage)
    wall_time_sec: float = 0.0
    n_with_findings: int = Field(0, description="Trials with at least one integrity finding.")
    findings_by_kind: dict[str, int] = Field(
        default_factory=dict, description="Per finding kind, the trials with at least one finding of it."
    )


class JobResult(BaseModel):
    """The job's `result.json`: counts, metrics per (agent, model, dataset), timing.

    `trials` is kept in memory only (each trial has its own result.json).
    """

    job_name: str
    job_dir: str
    started_at: str = Field(default_factory=utc_now)
    finished_at: str | None = None
    complete: bool = Field(False, description="Every planned trial has a result that is not 'cancelled'.")
    n_planned: int = 0
    n_done: int = 0
    n_errors: int = 0
    n_cancelled: int = 0
    n_with_findings: int = Field(0, description="Trials with at least one integrity finding.")
    mean_reward: float = 0.0
    usage: Usage = Field(default_factory=Usage)
    wall_time_sec: float = 0.0
    metrics: list[GroupMetrics] = Field(default_factory=list)
    trials: list[TrialResult] = Field(default_factory=list, exclude=True)
