"""External agent harnesses (RFC 005): configuration, events and the adapter lifecycle.

A harness (Claude Code, Codex, mini-swe-agent, a custom CLI) owns its agent loop; evsys starts it, sends it
one message per turn, streams its events, and records its model calls through the recording proxy
(`evsys.model.proxy`). MCP: the task's `[environment] mcp_servers` go into each harness's MCP configuration;
evsys's own sandbox tools are injected over MCP when a job asks (`--harness-mcp-tools`, agent option
`mcp_tools`; `inject_tools` from Python). Multi-turn episodes of a harness (one step per turn) are the
engine's: `evsys.engine.episodes` (`evsys serve --harness NAME`, `EpisodeRunner(harness=...)`).

The names below load their modules on first use: naming an agent (`evsys.agent.registry`, which reads the
harness catalog) does not import the harness machinery a run of the built-in agents never needs."""

from __future__ import annotations

from evsys.util.imports import lazy_exports

_EXPORTS = {
    "COLLISION_PREFIX": "evsys.agent.harness.adapter",
    "RESERVED_TOOL_NAMES": "evsys.agent.harness.adapter",
    "HarnessAdapter": "evsys.agent.harness.adapter",
    "HarnessError": "evsys.agent.harness.adapter",
    "HarnessStartError": "evsys.agent.harness.adapter",
    "HarnessStateError": "evsys.agent.harness.adapter",
    "McpEndpoint": "evsys.agent.harness.adapter",
    "plan_injection": "evsys.agent.harness.adapter",
    "EnvTool": "evsys.agent.harness.config",
    "HarnessConfig": "evsys.agent.harness.config",
    "InjectedTool": "evsys.agent.harness.config",
    "ModelEndpoint": "evsys.agent.harness.config",
    "HarnessEvent": "evsys.agent.harness.events",
    "HarnessEventType": "evsys.agent.harness.events",
    "HarnessTurn": "evsys.agent.harness.events",
    "HarnessInstall": "evsys.agent.harness.install",
    "HarnessInstaller": "evsys.agent.harness.install",
    "HarnessInstallError": "evsys.agent.harness.install",
    "PerTurnHarnessAdapter": "evsys.agent.harness.per_turn",
    "HostProcessLauncher": "evsys.agent.harness.process",
    "ProcessLauncher": "evsys.agent.harness.process",
    "StdioHarnessAdapter": "evsys.agent.harness.stdio",
    "ProcessHarnessAdapter": "evsys.agent.harness.turns",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS, (), "")
