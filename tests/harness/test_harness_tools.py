"""Tool injection (names, withheld tools, MCP config written before start) and HarnessConfig validation."""

from __future__ import annotations

import json

import pydantic
import pytest
from tiny_harness_config import tiny_config

from evsys.agent.harness import (
    EnvTool,
    HarnessConfig,
    HarnessStateError,
    McpEndpoint,
    StdioHarnessAdapter,
    plan_injection,
)

CLAUDE_LIKE_BUILTINS = frozenset({"Bash", "Read", "Edit", "Write"})


def test_collisions_get_the_env_prefix_and_reward_tools_are_withheld():
    """A built-in's name (any case) becomes env_<name>; reward/lifecycle/reserved tools never show."""
    tools = [
        EnvTool(name="bash"),
        EnvTool(name="search_docs"),
        EnvTool(name="step"),
        EnvTool(name="Close"),
        EnvTool(name="grade", kind="reward"),
        EnvTool(name="restart_env", kind="lifecycle"),
    ]
    injected, withheld = plan_injection(tools, CLAUDE_LIKE_BUILTINS)
    assert [(t.exposed_name, t.tool.name) for t in injected] == [
        ("env_bash", "bash"),
        ("search_docs", "search_docs"),
    ]
    assert withheld == ["step", "Close", "grade", "restart_env"]


def test_a_prefixed_name_that_is_taken_is_an_error():
    """`bash` -> `env_bash` cannot coexist with an environment tool already called `env_bash`."""
    with pytest.raises(ValueError, match="'bash' would be exposed as 'env_bash'"):
        plan_injection([EnvTool(name="env_bash"), EnvTool(name="bash")], frozenset({"bash"}))


def test_bad_tool_and_config_values_name_the_field():
    """Validation errors point at the offending field."""
    with pytest.raises(pydantic.ValidationError, match="tool name 'rm -rf' must match"):
        EnvTool(name="rm -rf")
    with pytest.raises(pydantic.ValidationError, match="command"):
        HarnessConfig(name="h", command=[])
    with pytest.raises(pydantic.ValidationError, match="harness name 'my harness'"):
        HarnessConfig(name="my harness", command=["x"])
    with pytest.raises(pydantic.ValidationError, match="session_timeout_s"):
        HarnessConfig(name="h", command=["x"], session_timeout_s=0)


async def test_mcp_config_is_written_before_start_and_seen_by_the_harness(tmp_path):
    """Injected tools produce the harness's MCP config file before it starts; injecting later is refused."""
    config_path = tmp_path / "mcp.json"
    config = tiny_config(tmp_path, "--mcp-config", str(config_path), mcp_config_path=str(config_path))
    mcp = McpEndpoint(url="http://127.0.0.1:9/mcp", headers={"Authorization": "Bearer trial-key"})
    adapter = StdioHarnessAdapter(config, mcp=mcp)
    adapter.builtin_tools = frozenset({"bash"})
    adapter.inject_tools([EnvTool(name="bash"), EnvTool(name="reset")])
    adapter.inject_tools([EnvTool(name="lookup")])
    assert adapter.tool_mapping() == {"env_bash": "bash", "lookup": "lookup"}
    assert adapter.withheld_tools == ["reset"]
    try:
        await adapter.start()
        server = adapter.ready_info["mcp_servers"]["evsys-env"]
        assert server == {"type": "http", "url": mcp.url, "headers": mcp.headers}
        assert json.loads(config_path.read_text())["mcpServers"]["evsys-env"]["url"] == mcp.url
        with pytest.raises(HarnessStateError, match="before start"):
            adapter.inject_tools([EnvTool(name="late")])
    finally:
        await adapter.stop()


async def test_no_tools_means_no_mcp_config(tmp_path):
    """Without injected tools nothing is written, even when a path is configured."""
    config_path = tmp_path / "mcp.json"
    adapter = StdioHarnessAdapter(
        tiny_config(tmp_path, mcp_config_path=str(config_path)), mcp=McpEndpoint(url="http://127.0.0.1:9/mcp")
    )
    try:
        await adapter.start()
    finally:
        await adapter.stop()
    assert not config_path.exists()
