"""`HarnessAdapter`: the lifecycle every external-harness integration implements (RFC 005).

`inject_tools` (before `start` only) decides how environment tools appear to the harness: reward and
lifecycle tools and the reserved names `reset`, `step`, `state`, `close` are withheld; a name that
collides with one of the harness's built-in tools gets the `env_` prefix. The task's own MCP servers
(`[environment] mcp_servers`, given as `mcp_servers`) are listed beside them: stdio servers for the harness
to start inside the sandbox, HTTP ones for it to reach from there. `start` writes the harness's MCP
configuration (when it has servers to list) and starts the harness;
`send_message_streaming` runs one conversational turn and yields `HarnessEvent`s ending with
`TURN_COMPLETE`; `send_message` collects them into a `HarnessTurn`."""

from __future__ import annotations

import json
import os
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from evsys.agent.harness.config import EnvTool, HarnessConfig, InjectedTool, ModelEndpoint
from evsys.agent.harness.events import EventLog, HarnessEvent, HarnessEventType, HarnessTurn
from evsys.records import CausedError, FailureCause, Step
from evsys.task.models import McpServerConfig

RESERVED_TOOL_NAMES = frozenset({"reset", "step", "state", "close"})
"""Names a served or injected tool can never have: they would let an agent drive its own episode (OpenEnv's
rule); `evsys serve` and MCP tool injection both refuse them."""
COLLISION_PREFIX = "env_"


class HarnessError(CausedError, RuntimeError):
    """A harness failed (the trial records cause `agent_error`)."""

    failure_cause = FailureCause.AGENT_ERROR


class HarnessStartError(HarnessError):
    """The harness could not start: it exited, printed garbage or stayed silent past its startup timeout."""


class HarnessStateError(HarnessError):
    """The adapter was used out of order (inject after start, a turn on a stopped harness, two turns)."""


@dataclass
class McpEndpoint:
    """Where the harness reaches the environment's MCP server, and the headers it must send."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    server_name: str = "evsys-env"


def plan_injection(
    tools: list[EnvTool], builtin_tools: frozenset[str]
) -> tuple[list[InjectedTool], list[str]]:
    """Which tools the harness sees and under what names, and which were withheld (by name)."""
    builtins = {name.lower() for name in builtin_tools}
    injected: list[InjectedTool] = []
    withheld: list[str] = []
    taken: set[str] = set()
    for tool in tools:
        if tool.kind != "domain" or tool.name.lower() in RESERVED_TOOL_NAMES:
            withheld.append(tool.name)
            continue
        exposed = COLLISION_PREFIX + tool.name if tool.name.lower() in builtins else tool.name
        if exposed.lower() in taken or exposed.lower() in builtins:
            raise ValueError(f"tool {tool.name!r} would be exposed as {exposed!r}, which is already taken")
        taken.add(exposed.lower())
        injected.append(InjectedTool(exposed_name=exposed, tool=tool))
    return injected, withheld


def mcp_servers_json(endpoint: McpEndpoint) -> bytes:
    """The common `{"mcpServers": {...}}` configuration (Claude Code, Cursor, Gemini CLI), one server."""
    server = {"type": "http", "url": endpoint.url, "headers": dict(endpoint.headers)}
    return (json.dumps({"mcpServers": {endpoint.server_name: server}}, indent=2) + "\n").encode()


def task_server_entry(server: McpServerConfig) -> dict[str, Any]:
    """A task's MCP server in the common `mcpServers` shape: `{"type": "stdio", "command", "args"}`, or
    `{"type": "http" | "sse", "url", "headers"}` with `${VAR}` in header values taken from evsys's own
    environment (the values end up in a file inside the sandbox, readable by the agent)."""
    if server.transport == "stdio":
        return {"type": "stdio", "command": server.command, "args": list(server.args)}
    kind = "http" if server.transport == "streamable-http" else "sse"
    return {"type": kind, "url": server.url, "headers": server.resolved_headers(os.environ)}


class HarnessAdapter(ABC):
    """Base class of harness integrations. Subclasses set `builtin_tools` and implement the lifecycle."""

    builtin_tools: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        config: HarnessConfig,
        *,
        endpoint: ModelEndpoint | None = None,
        mcp: McpEndpoint | None = None,
        mcp_servers: list[McpServerConfig] | None = None,
    ) -> None:
        self.config = config
        self.endpoint = endpoint
        self.mcp = mcp
        self.task_mcp_servers = list(mcp_servers or [])
        self.injected_tools: list[InjectedTool] = []
        self.withheld_tools: list[str] = []
        self.started = False

    def inject_tools(self, tools: list[EnvTool]) -> list[InjectedTool]:
        """Offer environment tools to the harness (before `start`); returns them under their exposed names."""
        if self.started:
            raise HarnessStateError(
                f"inject_tools must be called before start(): harness {self.config.name!r} is already running"
            )
        injected, withheld = plan_injection(
            [*[t.tool for t in self.injected_tools], *tools], self.builtin_tools
        )
        self.injected_tools, self.withheld_tools = injected, [*self.withheld_tools, *withheld]
        return injected

    def tool_mapping(self) -> dict[str, str]:
        """Exposed name -> the environment's own tool name (what the MCP server must route)."""
        return {t.exposed_name: t.tool.name for t in self.injected_tools}

    def mcp_server_entries(self) -> dict[str, dict[str, Any]]:
        """Every MCP server the harness is given, by name, in the common `mcpServers` shape: the injected
        tools' server (when tools were injected and its endpoint is known), then the task's own servers (a
        task server named like the injected one is left out)."""
        servers: dict[str, dict[str, Any]] = {}
        if self.injected_tools and self.mcp is not None:
            servers[self.mcp.server_name] = {
                "type": "http",
                "url": self.mcp.url,
                "headers": dict(self.mcp.headers),
            }
        for server in self.task_mcp_servers:
            servers.setdefault(server.name, task_server_entry(server))
        return servers

    def render_mcp_config(self) -> bytes | None:
        """The MCP configuration file to write at `config.mcp_config_path` (None: nothing to write)."""
        servers = self.mcp_server_entries()
        if not servers or not self.config.mcp_config_path:
            return None
        return (json.dumps({"mcpServers": servers}, indent=2) + "\n").encode()

    def model_env(self) -> dict[str, str]:
        """Environment variables that point the harness at its model endpoint (OpenAI-style by default)."""
        if self.endpoint is None:
            return {}
        key_var = self.config.api_key_env_var or "OPENAI_API_KEY"
        return {
            key_var: self.endpoint.api_key,
            "OPENAI_BASE_URL": self.endpoint.base_url.rstrip("/") + "/v1",
            "EVSYS_MODEL": self.config.model or self.endpoint.model,
        }

    @abstractmethod
    async def start(self) -> None:
        """Start the harness; raise `HarnessStartError` with a clear message when it cannot start."""

    @abstractmethod
    async def stop(self) -> None:
        """Stop the harness and everything it started (idempotent)."""

    @abstractmethod
    def send_message_streaming(self, message: str) -> AsyncIterator[HarnessEvent]:
        """Run one turn, yielding events as they happen; the last event is TURN_COMPLETE."""

    @abstractmethod
    async def is_alive(self) -> bool:
        """Whether the harness process is running."""

    async def native_steps(self) -> list[Step]:
        """The harness's own log of the run as trajectory steps (saved beside the proxy's view as
        `agent/native-trajectory.json`); the default, for harnesses without one, is none."""
        return []

    async def send_message(self, message: str) -> HarnessTurn:
        """Run one turn and return all its events."""
        started = time.monotonic()
        events = EventLog()
        async for event in self.send_message_streaming(message):
            events.append(event)
        last = events.last
        ok = (
            last is not None
            and last.type == HarnessEventType.TURN_COMPLETE
            and last.data.get("status") == "ok"
        )
        error = None if ok else str(last.data.get("error") if last else "the turn produced no events")
        turn = last.turn if last else 0
        return HarnessTurn(
            turn=turn, events=events.events, ok=ok, error=error, duration_s=time.monotonic() - started
        )

    async def __aenter__(self) -> HarnessAdapter:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
