"""evsys: run LLM agents on tasks in isolated sandboxes, score them, and get token-exact trajectories back.

`Job`, `JobConfig`, `AgentSpec`, `TrialResult`, `JobResult`, `run_rollouts`, `VerifiedTask`, `PromptTask`,
`verifier`, `load_python_tasks`, `load_repo_tasks`, `RepoTask`, `TrajectoryGroup`, `RolloutTrajectory` and
`to_hf_dataset` are importable from here; they load on first use so `import evsys` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from evsys.util.version import __version__

_LAZY = {
    "Job": "evsys.engine.job",
    "JobConfig": "evsys.engine.config",
    "AgentSpec": "evsys.engine.config",
    "TrialResult": "evsys.records",
    "JobResult": "evsys.records",
    "run_rollouts": "evsys.rollouts",
    "VerifiedTask": "evsys.task.python",
    "PromptTask": "evsys.task.python",
    "load_python_tasks": "evsys.task.python",
    "load_repo_tasks": "evsys.repo.rows",
    "RepoTask": "evsys.repo.rows",
    "verifier": "evsys.verify.functions",
    "TrajectoryGroup": "evsys.records",
    "RolloutTrajectory": "evsys.records",
    "to_hf_dataset": "evsys.trajectory.export",
}

__all__ = [
    "AgentSpec",
    "Job",
    "JobConfig",
    "JobResult",
    "PromptTask",
    "RepoTask",
    "RolloutTrajectory",
    "TrajectoryGroup",
    "TrialResult",
    "VerifiedTask",
    "__version__",
    "load_python_tasks",
    "load_repo_tasks",
    "run_rollouts",
    "to_hf_dataset",
    "verifier",
]

if TYPE_CHECKING:
    from evsys.engine.config import AgentSpec, JobConfig
    from evsys.engine.job import Job
    from evsys.records import JobResult, RolloutTrajectory, TrajectoryGroup, TrialResult
    from evsys.repo.rows import RepoTask, load_repo_tasks
    from evsys.rollouts import run_rollouts
    from evsys.task.python import PromptTask, VerifiedTask, load_python_tasks
    from evsys.trajectory.export import to_hf_dataset
    from evsys.verify.functions import verifier


def __getattr__(name: str) -> Any:
    """Import the engine's public names on first access (PEP 562)."""
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'evsys' has no attribute '{name}'")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value
