"""A task's `[environment] mcp_servers` reach harnesses, and evsys's own sandbox tools are injected over MCP
in production runs (`--harness-mcp-tools`): the configuration each harness reads, and Claude Code in real
trials of the `mcp-facts` task (a stdio MCP server the task ships) on a tiny model scripted to call its
tool."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest

from evsys.agent.harness.agent import EVENTS_FILE
from evsys.agent.harness.catalog import HarnessSetup
from evsys.agent.harness.claude_code import build as build_claude_code
from evsys.agent.harness.codex import build as build_codex
from evsys.agent.harness.config import ModelEndpoint
from evsys.agent.harness.process import HostProcessLauncher
from evsys.agent.harness.sandbox_tools import SandboxToolService
from evsys.agent.tools import SandboxTools
from evsys.engine import Job
from evsys.engine.config import AgentSpec, JobConfig
from evsys.model.local.client import LocalModelClient
from evsys.records import SandboxSpec
from evsys.rollouts import BorrowedModelClient
from evsys.sandbox.registry import create_sandbox
from evsys.task.models import McpServerConfig
from evsys.testing.tiny_model import build_tiny_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))  # mcp_facts: the MCP facts task
from mcp_facts import ANSWER, CLAUDE_ARGS, TASK_DIR, TOOL_NAME, mcp_recipe

pytestmark = pytest.mark.timeout(1200)  # the scripted model trains once (cached) on 2 busy cores

SERVERS = [
    McpServerConfig(name="facts", transport="stdio", command="/usr/bin/python3", args=["-I", "/srv/f.py"]),
    McpServerConfig(
        name="search",
        transport="http",
        url="http://search.internal:8000/mcp",
        headers={"Authorization": "Bearer ${EVSYS_TEST_SEARCH_TOKEN}"},
    ),
    McpServerConfig(name="legacy", transport="sse", url="http://legacy.internal/sse"),
]


def host_setup() -> HarnessSetup:
    return HarnessSetup(
        launcher=HostProcessLauncher(),
        endpoint=ModelEndpoint("http://127.0.0.1:9", "evsys-key", "tiny"),
        bin_dir="/opt/bin",
        workdir="/app",
        home="/home/agent",
        mcp_servers=SERVERS,
    )


def test_claude_code_and_codex_configs_list_the_tasks_servers(monkeypatch):
    """Claude Code's --mcp-config file and Codex's config.toml hold every task server: stdio ones with their
    command line, HTTP ones with their URL and `${VAR}` headers taken from evsys's environment; Claude Code
    then lists MCP tools directly (no ToolSearch)."""
    monkeypatch.setenv("EVSYS_TEST_SEARCH_TOKEN", "t0k")
    claude = build_claude_code(host_setup())
    servers = json.loads(claude.render_mcp_config())["mcpServers"]
    assert servers == {
        "facts": {"type": "stdio", "command": "/usr/bin/python3", "args": ["-I", "/srv/f.py"]},
        "search": {
            "type": "http",
            "url": "http://search.internal:8000/mcp",
            "headers": {"Authorization": "Bearer t0k"},
        },
        "legacy": {"type": "sse", "url": "http://legacy.internal/sse", "headers": {}},
    }
    assert claude.environment()["ENABLE_TOOL_SEARCH"] == "false"
    codex = build_codex(host_setup())
    from evsys.agent.harness.codex import render_config

    config = tomllib.loads(
        render_config(base_url="http://x", model="m", mcp_servers=codex.mcp_server_entries())
    )
    assert config["mcp_servers"]["facts"] == {"command": "/usr/bin/python3", "args": ["-I", "/srv/f.py"]}
    assert config["mcp_servers"]["search"] == {
        "url": "http://search.internal:8000/mcp",
        "http_headers": {"Authorization": "Bearer t0k"},
    }


def test_acp_harnesses_get_the_tasks_servers_in_session_new():
    """ACP harnesses (here Gemini CLI) pass the task's servers in `session/new`, each in its ACP shape."""
    from evsys.agent.harness.gemini_cli import build as build_gemini_cli

    servers = build_gemini_cli(host_setup()).mcp_servers()
    dumped = [s.model_dump(exclude_none=True) for s in servers]
    assert dumped[0] == {
        "name": "facts",
        "command": "/usr/bin/python3",
        "args": ["-I", "/srv/f.py"],
        "env": [],
    }
    assert [(d["name"], d.get("type"), d.get("url")) for d in dumped[1:]] == [
        ("search", "http", "http://search.internal:8000/mcp"),
        ("legacy", "sse", "http://legacy.internal/sse"),
    ]


def test_bad_server_entries_name_the_problem():
    """Harbor's rules: stdio needs a command, HTTP transports a url, headers only over HTTP."""
    with pytest.raises(ValueError, match="'stdio' needs a command"):
        McpServerConfig(name="a", transport="stdio")
    with pytest.raises(ValueError, match="needs a url"):
        McpServerConfig(name="a", transport="streamable-http")
    with pytest.raises(ValueError, match="headers are for HTTP"):
        McpServerConfig(name="a", transport="stdio", command="x", headers={"A": "b"})


@pytest.fixture(scope="module")
def mcp_client() -> LocalModelClient:
    """The tiny model scripted to call the task's tool (the loop agent's tests use the same one)."""
    return LocalModelClient(str(build_tiny_model(mcp_recipe())))


async def run_claude_code(tmp_path, client, name: str, **options: object):
    kwargs = {"extra_args": CLAUDE_ARGS, "max_tokens_cap": 64, **options}
    config = JobConfig(
        datasets=[TASK_DIR],
        agents=[AgentSpec(name="claude-code", model="tiny", kwargs=kwargs)],
        jobs_dir=tmp_path / "jobs",
        job_name=name,
        n_concurrent=1,
    )
    job = Job(config, model_client_factory=lambda _spec: BorrowedModelClient(client))
    (trial,) = (await job.run()).trials
    assert trial.failure is None, trial.failure
    trial_dir = job.store.trial_dir(trial.trial_name)
    trajectory = json.loads((trial_dir / "trajectory.json").read_text())
    events = [json.loads(line) for line in (trial_dir / "agent" / EVENTS_FILE).read_text().splitlines()]
    offered = [t["function"]["name"] for t in trajectory["agent"]["tool_definitions"] or []]
    return trial, offered, events


@pytest.mark.needs_model
async def test_claude_code_lists_and_calls_the_tasks_mcp_tool(tmp_path, mcp_client):
    """`-a claude-code` on mcp-facts: Claude Code starts the task's stdio server inside the no-network
    sandbox, offers its tool to the model, calls it when the model asks, and gets the server's answer; the
    server's log of the call gives reward 1."""
    trial, offered, events = await run_claude_code(tmp_path, mcp_client, "claude-mcp")
    assert offered == [TOOL_NAME]
    calls = [e["data"] for e in events if e["type"] == "tool_call"]
    assert calls and calls[0]["name"] == TOOL_NAME and calls[0]["arguments"] == {"topic": "kumquat"}
    results = [e["data"] for e in events if e["type"] == "tool_result"]
    assert results and ANSWER in results[0]["output"] and not results[0]["is_error"]
    assert trial.reward == 1.0


@pytest.mark.needs_model
async def test_harness_mcp_tools_injects_the_sandbox_tools(tmp_path, mcp_client):
    """With `mcp_tools` (`--harness-mcp-tools`) Claude Code is also offered evsys's sandbox tools over MCP,
    a name that collides with a built-in prefixed (`env_bash`), `submit` withheld, beside the task's tool."""
    trial, offered, _ = await run_claude_code(tmp_path, mcp_client, "claude-env-tools", mcp_tools=True)
    assert TOOL_NAME in offered
    injected = sorted(name for name in offered if name.startswith("mcp__evsys-env__"))
    assert injected == [
        f"mcp__evsys-env__{n}" for n in ("env_bash", "read_file", "str_replace", "write_file")
    ]
    assert "mcp_tool_calls" in trial.agent_metadata


async def test_injected_sandbox_tools_run_in_the_sandbox_and_are_recorded(proxy, tmp_path):
    """What `--harness-mcp-tools` serves: `env_bash` (Claude Code has a `Bash`) runs in the trial's sandbox
    as the loop agent's bash would, `submit` is never offered, and each call is on the session's record."""
    box = create_sandbox(SandboxSpec(name="env-tools", workdir="/app"))
    await box.start()
    try:
        session = proxy.open_session()
        adapter = build_claude_code(host_setup())
        service = SandboxToolService(SandboxTools(box, workdir="/app"))
        server = service.attach(adapter, session)
        assert sorted(server.tool_mapping()) == ["env_bash", "read_file", "str_replace", "write_file"]
        output = await server.call("env_bash", {"command": "echo hi > made.txt && id -un && cat made.txt"})
        await service.close()
        made = await box.exec("cat /app/made.txt")
    finally:
        await box.stop()
    assert (output.text.split(), output.is_error) == (["agent", "hi"], False)
    assert made.stdout == "hi\n"
    assert [(c.name, c.tool) for c in session.tool_calls] == [("env_bash", "bash")]
