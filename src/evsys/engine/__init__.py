"""Running trials: `TrialSpec` + `run_trial` (one trial anywhere), `Trial` (evsys.engine.trial: its phases,
one file each, over one `TrialState`), `Job` (many, via an `Executor`), `JobStore` (the job directory),
results and metrics."""

from evsys.engine.config import AgentSpec, ExecutorSpec, JobConfig, TrialConfig
from evsys.engine.executors import Executor, ExecutorContext, LocalExecutor, create_executor
from evsys.engine.job import Job
from evsys.engine.metrics import compute_metrics, mean_pass_at_k, pass_at_k
from evsys.engine.plan import PlanError, plan_trials
from evsys.engine.retries import is_retryable, retry_delay
from evsys.engine.run import PackedTrial, TrialResources, run_trial, run_trial_packed, run_trial_sync
from evsys.engine.spec import PlannedTrial, TaskRef, TrialSpec
from evsys.engine.store import JobStore, JobStoreError, read_job_config
from evsys.engine.trial import Trial

__all__ = [
    "AgentSpec",
    "Executor",
    "ExecutorContext",
    "ExecutorSpec",
    "Job",
    "JobConfig",
    "JobStore",
    "JobStoreError",
    "LocalExecutor",
    "PackedTrial",
    "PlanError",
    "PlannedTrial",
    "TaskRef",
    "Trial",
    "TrialConfig",
    "TrialResources",
    "TrialSpec",
    "compute_metrics",
    "create_executor",
    "is_retryable",
    "mean_pass_at_k",
    "pass_at_k",
    "plan_trials",
    "read_job_config",
    "retry_delay",
    "run_trial",
    "run_trial_packed",
    "run_trial_sync",
]
