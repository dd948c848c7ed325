"""Episodes: a trial whose agent phase is driven step by step from outside (reset, then one action per step,
the reward at the end), the engine floor under both `evsys serve` (evsys.server: HTTP, WebSocket and `/mcp`
transport only) and the framework integrations (evsys.integrations).

- `protocol`: the step API's records (`ResetParams`, `MessageAction`, `CallToolAction`, `ServedObservation`,
  `ServedState`) and its errors (`ServeError`, `ErrorCode`);
- `catalog`: the tasks an episode may start (`TaskCatalog`, `ServedTask`) and the job they record into;
- `agents`: the agent phase of an episode (`EpisodeAgent`, `ServedAgent`: the client's tool calls, the task's
  MCP tools among them, once per step of a multi-step task); `episode`: one episode over a trial (`Episode`,
  `EpisodeLimits`); `harness`: one driven by an agent harness (`HarnessEpisode`);
- `service`: sessions and their episodes, capacity and the job's result (`ServeService`, `ServeSettings`,
  `Session`, `build_service`).
"""

from evsys.engine.episodes.catalog import ServedTask, TaskCatalog
from evsys.engine.episodes.episode import Episode, EpisodeLimits
from evsys.engine.episodes.protocol import ErrorCode, ServeError
from evsys.engine.episodes.service import ServeService, ServeSettings, Session, build_service

__all__ = [
    "Episode",
    "EpisodeLimits",
    "ErrorCode",
    "ServeError",
    "ServeService",
    "ServeSettings",
    "ServedTask",
    "Session",
    "TaskCatalog",
    "build_service",
]
