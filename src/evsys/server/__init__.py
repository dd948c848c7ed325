"""Serving evsys tasks as OpenEnv-compatible environments (`evsys serve`): the transport only — WebSocket
sessions, stateless HTTP and `/mcp` (app.py, mcp.py, run.py) over the episodes of evsys.engine.episodes, each
episode a trial of the serving job (see docs/serve.md). The names below are re-exported from there."""

from evsys.agent.harness.adapter import RESERVED_TOOL_NAMES
from evsys.engine.episodes import (
    Episode,
    EpisodeLimits,
    ErrorCode,
    ServedTask,
    ServeError,
    ServeService,
    ServeSettings,
    Session,
    TaskCatalog,
)

__all__ = [
    "RESERVED_TOOL_NAMES",
    "Episode",
    "EpisodeLimits",
    "ErrorCode",
    "ServeError",
    "ServeService",
    "ServeSettings",
    "ServedTask",
    "Session",
    "TaskCatalog",
]
