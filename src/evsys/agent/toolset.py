"""What a model is offered in one run: the built-in tools, the task's MCP tools and its custom tools, cut to
the task's own selection (`VerifiedTask(tools=[...])`, evsys.task.turns).

`Toolset.call` is the one place a call is routed: a name the run does not offer — a built-in tool the task
left out among them — is an `unknown_tool` outcome listing what is offered, so the model cannot reach a tool
by guessing its name. Used by the loop agent and by served episodes (evsys.engine.episodes).
"""

from __future__ import annotations

from typing import Any

from evsys.agent.host_tools import HostTools
from evsys.agent.mcp_client import TaskMcpTools
from evsys.agent.tools import SandboxTools, ToolOutcome
from evsys.records import ToolCall
from evsys.task.turns import MCP_PREFIX, Interaction


def _function_name(schema: dict[str, Any]) -> str:
    return str(schema["function"]["name"])


def _mcp_selected(name: str, selection: list[str] | None) -> bool:
    """Whether an MCP tool's exposed name is in the selection (`mcp__server__tool` or `mcp__server`)."""
    if selection is None:
        return True
    server = name.removeprefix(MCP_PREFIX).split("__")[0]
    return name in selection or f"{MCP_PREFIX}{server}" in selection


def builtin_schemas(interaction: Interaction, sandboxed: bool = True) -> list[dict[str, Any]]:
    """The built-in tools' schemas the task offers: the ones it names; when it names none, all of them in a
    sandbox and none without one (a sandbox-free chat with a respond hook)."""
    chosen = interaction.builtin_tools()
    if chosen is None:
        chosen = [_function_name(s) for s in SandboxTools.schemas()] if sandboxed else []
    return [s for s in SandboxTools.schemas() if _function_name(s) in chosen]


class Toolset:
    """The tools of one run: `schemas()` (what the model is offered) and `await call(tool_call)`."""

    def __init__(
        self,
        interaction: Interaction,
        sandbox_tools: SandboxTools | None,
        host: HostTools,
        mcp: TaskMcpTools | None = None,
    ) -> None:
        self.sandbox_tools = sandbox_tools
        self.host = host
        self.mcp = mcp
        mcp_schemas = mcp.schemas() if mcp is not None else []
        selection = interaction.mcp_tools()
        self._schemas = [
            *builtin_schemas(interaction, sandboxed=sandbox_tools is not None),
            *(s for s in mcp_schemas if _mcp_selected(_function_name(s), selection)),
            *host.schemas(),
        ]
        self.names = [_function_name(s) for s in self._schemas]
        clash = sorted({name for name in self.names if self.names.count(name) > 1})
        if clash:
            raise ValueError(f"tool name {clash[0]!r} is offered twice; every tool needs its own name")

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI-shape schemas of every offered tool: built-in, then MCP, then custom ones."""
        return list(self._schemas)

    def mcp_names(self) -> list[str]:
        """The offered MCP tools' names."""
        return [name for name in self.names if self.mcp is not None and name in self.mcp]

    async def call(self, call: ToolCall, max_output_chars: int) -> ToolOutcome:
        """Run one call on the tool it names; a name not offered is an `unknown_tool` outcome."""
        name = call.function_name
        if name not in self.names:
            offered = ", ".join(self.names) or "none"
            return ToolOutcome(
                content=f"error: unknown tool {name!r}; available: {offered}", error_kind="unknown_tool"
            )
        if name in self.host:
            return await self.host.call(call)
        if self.mcp is not None and name in self.mcp:
            return await self.mcp.call(call, max_output_chars)
        if self.sandbox_tools is None:  # `submit` of a run without a sandbox
            return ToolOutcome(content="submitted", submitted=True)
        return await self.sandbox_tools.call(call)
