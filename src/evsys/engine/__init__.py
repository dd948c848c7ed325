"""Running many trials: `Job`, `JobConfig`, `AgentSpec`, `Trial`, `JobStore`, results and metrics."""

from evsys.engine.config import AgentSpec, JobConfig, TrialConfig
from evsys.engine.job import Job, is_retryable, retry_delay
from evsys.engine.metrics import compute_metrics, mean_pass_at_k, pass_at_k
from evsys.engine.plan import PlanError, plan_trials
from evsys.engine.results import (
    RETRYABLE_CAUSES,
    FailureCause,
    GroupMetrics,
    JobResult,
    PhaseTimings,
    TrialFailure,
    TrialResult,
)
from evsys.engine.store import JobStore, JobStoreError, read_job_config
from evsys.engine.trial import PlannedTrial, Trial
from evsys.trajectory.models import Usage

__all__ = [
    "RETRYABLE_CAUSES",
    "AgentSpec",
    "FailureCause",
    "GroupMetrics",
    "Job",
    "JobConfig",
    "JobResult",
    "JobStore",
    "JobStoreError",
    "PhaseTimings",
    "PlanError",
    "PlannedTrial",
    "Trial",
    "TrialConfig",
    "TrialFailure",
    "TrialResult",
    "Usage",
    "compute_metrics",
    "is_retryable",
    "mean_pass_at_k",
    "pass_at_k",
    "plan_trials",
    "read_job_config",
    "retry_delay",
]
