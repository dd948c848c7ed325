"""Executors: where a job's trials run. `Executor` is the protocol; `LocalExecutor` runs them in this process,
`ProcessExecutor` (evsys.engine.executors.processes) over worker processes on this machine, `RayExecutor`
(evsys.engine.executors.ray, the `evsys[ray]` extra) on a Ray cluster.

A new executor (a Ray cluster, a process pool) is one module implementing `Executor.execute` plus one
`register_executor(name, cls)` call (or an entry in the `evsys.executors` entry-point group); the `Job`
above it is unchanged.
"""

from evsys.engine.executors.base import (
    EXECUTOR_ENTRY_POINTS,
    Executor,
    ExecutorContext,
    ExecutorUnavailableError,
    create_executor,
    register_executor,
)
from evsys.engine.executors.local import LocalExecutor

__all__ = [
    "EXECUTOR_ENTRY_POINTS",
    "Executor",
    "ExecutorContext",
    "ExecutorUnavailableError",
    "LocalExecutor",
    "create_executor",
    "register_executor",
]
