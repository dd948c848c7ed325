"""External agent harnesses (RFC 005): configuration, events, the adapter lifecycle and multi-turn episodes.

A harness (Claude Code, Codex, mini-swe-agent, a custom CLI) owns its agent loop; evsys starts it, sends it
one message per turn, streams its events, and records its model calls through the recording proxy
(`evsys.model.proxy`). MCP: the task's `[environment] mcp_servers` go into each harness's MCP configuration;
evsys's own sandbox tools are injected over MCP when a job asks (`--harness-mcp-tools`, agent option
`mcp_tools`; `inject_tools` and `HarnessEnvironment` from Python)."""

from evsys.agent.harness.adapter import (
    COLLISION_PREFIX,
    RESERVED_TOOL_NAMES,
    HarnessAdapter,
    HarnessError,
    HarnessStartError,
    HarnessStateError,
    McpEndpoint,
    plan_injection,
)
from evsys.agent.harness.config import (
    EnvTool,
    HarnessConfig,
    InjectedTool,
    ModelEndpoint,
)
from evsys.agent.harness.environment import HarnessEnvironment, HarnessObservation
from evsys.agent.harness.events import HarnessEvent, HarnessEventType, HarnessTurn
from evsys.agent.harness.install import HarnessInstall, HarnessInstaller, HarnessInstallError
from evsys.agent.harness.per_turn import PerTurnHarnessAdapter
from evsys.agent.harness.process import HostProcessLauncher, ProcessLauncher
from evsys.agent.harness.stdio import StdioHarnessAdapter
from evsys.agent.harness.turns import ProcessHarnessAdapter

__all__ = [
    "COLLISION_PREFIX",
    "RESERVED_TOOL_NAMES",
    "EnvTool",
    "HarnessAdapter",
    "HarnessConfig",
    "HarnessEnvironment",
    "HarnessError",
    "HarnessEvent",
    "HarnessEventType",
    "HarnessInstall",
    "HarnessInstallError",
    "HarnessInstaller",
    "HarnessObservation",
    "HarnessStartError",
    "HarnessStateError",
    "HarnessTurn",
    "HostProcessLauncher",
    "InjectedTool",
    "McpEndpoint",
    "ModelEndpoint",
    "PerTurnHarnessAdapter",
    "ProcessHarnessAdapter",
    "ProcessLauncher",
    "StdioHarnessAdapter",
    "plan_injection",
]
