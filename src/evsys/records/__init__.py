"""The records that cross evsys's boundaries, on the ground floor so that every layer names the same ones.

- `trajectory`: the ATIF trajectory every trial writes (`Trajectory`, `Step`, `ToolCall`, `Usage`...) and the
  `TrajectoryRecorder` agents append to;
- `integrity`: what a trial tried against its grader (`IntegrityFinding`, `IntegrityPolicy`);
- `failure`: why a trial failed (`FailureCause`, `TrialFailure`) and `CausedError`, the base of errors that
  name their cause;
- `results`: what a job produces (`TrialResult`, `JobResult`, metrics);
- `rollouts`: what rollouts hand a trainer (`TrajectoryGroup`, `RolloutTrajectory`, `RolloutError`);
- `sandbox` and `image`: what a task declares and a sandbox consumes (`SandboxSpec`, `FileCopy`,
  `NetworkMode`, `CopyOutLimits`, `ImageSpec`) and the `ExecResult` of a command.

This package imports nothing from evsys but `evsys.util`.
"""

from evsys.records.failure import RETRYABLE_CAUSES, CausedError, FailureCause, TrialFailure
from evsys.records.image import ImageConfig, ImageSpec
from evsys.records.integrity import IntegrityFinding, IntegrityKind, IntegrityPolicy
from evsys.records.results import (
    PHASES,
    GroupMetrics,
    JobResult,
    PhaseTimings,
    StepResult,
    TimingStats,
    TrialImage,
    TrialResult,
)
from evsys.records.rollouts import (
    WRONG_ANSWER_CAUSES,
    AdvantageMethod,
    RolloutError,
    RolloutTrajectory,
    TrajectoryGroup,
)
from evsys.records.sandbox import (
    DEFAULT_LIMITS,
    DEFAULT_MAX_OUTPUT_BYTES,
    Bind,
    CopyOutLimits,
    ExecResult,
    ExecutionResult,
    FileCopy,
    LimitKind,
    NetworkMode,
    PodSpec,
    SandboxSpec,
    marked_output,
    parse_limit,
    truncation_marker,
)
from evsys.records.trajectory import (
    ATIF_SCHEMA_VERSION,
    AgentInfo,
    FinalMetrics,
    Observation,
    ObservationResult,
    Step,
    StepMetrics,
    StepSource,
    ToolCall,
    Trajectory,
    TrajectoryRecorder,
    Usage,
    utc_now,
)

__all__ = [
    "ATIF_SCHEMA_VERSION",
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "PHASES",
    "RETRYABLE_CAUSES",
    "WRONG_ANSWER_CAUSES",
    "AdvantageMethod",
    "AgentInfo",
    "Bind",
    "CausedError",
    "CopyOutLimits",
    "ExecResult",
    "ExecutionResult",
    "FailureCause",
    "FileCopy",
    "FinalMetrics",
    "GroupMetrics",
    "ImageConfig",
    "ImageSpec",
    "IntegrityFinding",
    "IntegrityKind",
    "IntegrityPolicy",
    "JobResult",
    "LimitKind",
    "NetworkMode",
    "Observation",
    "ObservationResult",
    "PhaseTimings",
    "PodSpec",
    "RolloutError",
    "RolloutTrajectory",
    "SandboxSpec",
    "Step",
    "StepMetrics",
    "StepResult",
    "StepSource",
    "TimingStats",
    "ToolCall",
    "Trajectory",
    "TrajectoryGroup",
    "TrajectoryRecorder",
    "TrialFailure",
    "TrialImage",
    "TrialResult",
    "Usage",
    "marked_output",
    "parse_limit",
    "truncation_marker",
    "utc_now",
]
