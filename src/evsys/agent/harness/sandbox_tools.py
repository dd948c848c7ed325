"""evsys's own sandbox tools served to a harness over MCP (`--harness-mcp-tools`, agent option `mcp_tools`).

The loop agent's tools (`bash`, `read_file`, `write_file`, `str_replace`; never `submit`) become `EnvTool`s,
are injected into the adapter before it starts (a name that collides with a built-in of the harness gets the
`env_` prefix, e.g. Claude Code's `Bash` -> `env_bash`) and are served at the proxy session's `/mcp`
(evsys.agent.harness.mcp_server). Each call runs in the trial's sandbox through `SandboxTools`, as the
sandbox's default user in the task's working directory, and is recorded on the session
(`session.tool_calls`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from evsys.agent.harness.adapter import HarnessAdapter
from evsys.agent.harness.config import EnvTool
from evsys.agent.tools import SandboxTools
from evsys.records import ToolCall

if TYPE_CHECKING:
    from evsys.agent.harness.mcp_server import ToolOutput, ToolServer
    from evsys.model.proxy.session import ProxySession

WITHHELD = frozenset({"submit"})  # ends the loop agent's run; a harness ends its turn on its own


def sandbox_env_tools() -> list[EnvTool]:
    """The loop agent's tools as environment tools (domain tools, their JSON schemas as input schemas)."""
    tools = []
    for schema in SandboxTools.schemas():
        function = schema["function"]
        if function["name"] in WITHHELD:
            continue
        tools.append(
            EnvTool(
                name=function["name"],
                description=function.get("description", ""),
                input_schema=function["parameters"],
            )
        )
    return tools


class SandboxToolService:
    """Routes MCP tool calls of one harness session to `SandboxTools` in the trial's sandbox."""

    def __init__(self, tools: SandboxTools) -> None:
        self.tools = tools
        self.server: ToolServer | None = None

    def attach(self, adapter: HarnessAdapter, session: ProxySession) -> ToolServer:
        """Inject the tools into `adapter` (before it starts) and serve them on `session`."""
        from evsys.agent.harness.mcp_server import serve_tools

        adapter.inject_tools(sandbox_env_tools())
        self.server = serve_tools(session, adapter.injected_tools, self.handle)
        return self.server

    async def handle(self, name: str, arguments: dict[str, Any]) -> ToolOutput:
        """Run one call in the sandbox; the model sees the observation the loop agent would."""
        from evsys.agent.harness.mcp_server import ToolOutput

        outcome = await self.tools.call(
            ToolCall(tool_call_id=f"mcp-{name}", function_name=name, arguments=arguments)
        )
        return ToolOutput(text=outcome.content, is_error=outcome.is_error)

    async def close(self) -> None:
        """Stop serving and close the shell session the tools opened."""
        if self.server is not None:
            await self.server.aclose()
            self.server = None
        await self.tools.close()
