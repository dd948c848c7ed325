"""Serving evsys tasks as OpenEnv-compatible environments (`evsys serve`): WebSocket sessions, stateless
HTTP, `/mcp`; each episode a trial of the serving job (see docs/serve.md)."""

from evsys.agent.harness.adapter import RESERVED_TOOL_NAMES
from evsys.server.catalog import ServedTask, TaskCatalog
from evsys.server.episode import Episode, EpisodeLimits
from evsys.server.protocol import ErrorCode, ServeError
from evsys.server.service import ServeService, ServeSettings, Session

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
