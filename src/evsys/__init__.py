"""evsys: run LLM agents on tasks in isolated sandboxes, score them, and get token-exact trajectories back.

`Job`, `JobConfig`, `AgentSpec`, `TrialResult` and `JobResult` are importable from here; they load on first
use so `import evsys` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "Job": "evsys.engine.job",
    "JobConfig": "evsys.engine.config",
    "AgentSpec": "evsys.engine.config",
    "TrialResult": "evsys.engine.results",
    "JobResult": "evsys.engine.results",
}

__all__ = ["AgentSpec", "Job", "JobConfig", "JobResult", "TrialResult", "__version__"]

if TYPE_CHECKING:
    from evsys.engine.config import AgentSpec, JobConfig
    from evsys.engine.job import Job
    from evsys.engine.results import JobResult, TrialResult


def __getattr__(name: str) -> Any:
    """Import the engine's public names on first access (PEP 562)."""
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'evsys' has no attribute '{name}'")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value
