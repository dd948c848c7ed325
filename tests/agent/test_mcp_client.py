"""`TaskMcpTools`: a task's MCP servers reached from inside a real no-network sandbox by every transport —
a stdio server started in the sandbox, and an HTTP server on the sandbox's own loopback reached through the
in-sandbox relay over Streamable HTTP (with a `${VAR}` header) and over the older SSE transport."""

from __future__ import annotations

import pytest
from mcp_facts import ANSWER, TASK_DIR

from evsys.agent.mcp_client import TaskMcpTools
from evsys.records import FileCopy, SandboxSpec, ToolCall
from evsys.sandbox.registry import create_sandbox
from evsys.task.models import McpServerConfig

ENV = TASK_DIR / "environment"
STDIO = McpServerConfig(
    name="facts", transport="stdio", command="/usr/bin/python3", args=["-I", "/opt/facts/facts_server.py"]
)


@pytest.fixture
async def sandbox():
    """A started no-network sandbox holding the facts servers, with the HTTP one listening on its loopback
    (yields the sandbox and the port)."""
    files = [
        FileCopy(src=ENV / "facts_server.py", dst="/opt/facts/facts_server.py"),
        FileCopy(src=ENV / "facts_http_server.py", dst="/opt/facts/facts_http_server.py"),
    ]
    box = create_sandbox(SandboxSpec(name="mcp-client", workdir="/app", files=files))
    await box.start()
    try:
        server = await box.spawn(["/usr/bin/python3", "-I", "/opt/facts/facts_http_server.py"], cwd="/app")
        line = (await server.stdout.readline()).decode()
        assert line.startswith("listening "), line
        yield box, int(line.split()[1])
    finally:
        await box.stop()


def lookup(name: str) -> ToolCall:
    return ToolCall(tool_call_id="c1", function_name=name, arguments={"topic": "kumquat"})


async def test_every_transport_lists_and_calls_the_tool(sandbox, monkeypatch):
    """Three servers, three transports: each tool is listed as `mcp__<server>__lookup_fact` and a call of each
    is answered by the server in the sandbox (which logs the three calls inside the sandbox)."""
    box, port = sandbox
    monkeypatch.setenv("EVSYS_TEST_FACTS_TOKEN", "s3cret")
    servers = [
        STDIO,
        McpServerConfig(
            name="web",
            transport="http",
            url=f"http://127.0.0.1:{port}/mcp",
            headers={"Authorization": "Bearer ${EVSYS_TEST_FACTS_TOKEN}"},
        ),
        McpServerConfig(name="old", transport="sse", url=f"http://127.0.0.1:{port}/sse"),
    ]
    async with TaskMcpTools(servers, box, workdir="/app") as mcp:
        names = [s["function"]["name"] for s in mcp.schemas()]
        assert names == ["mcp__facts__lookup_fact", "mcp__web__lookup_fact", "mcp__old__lookup_fact"]
        for name in names:
            outcome = await mcp.call(lookup(name), max_chars=1000)
            assert (outcome.content, outcome.is_error) == (ANSWER, False)
    log = await box.exec("cat /app/facts-calls.jsonl")
    assert log.stdout.count("kumquat") == 3


async def test_a_refused_http_server_is_a_clear_error(sandbox):
    """Without the header the server answers 401: starting the tools fails, naming the server and the
    relay's error (positive control: the same server with the header serves, above)."""
    box, port = sandbox
    server = McpServerConfig(name="web", transport="streamable-http", url=f"http://127.0.0.1:{port}/mcp")
    with pytest.raises(RuntimeError, match=r"task MCP server 'web' .* did not start.*401"):
        async with TaskMcpTools([server], box, workdir="/app"):
            pass


async def test_an_unknown_argument_shape_is_an_error_observation(sandbox):
    """A tool call the model could not write as JSON is an error observation, not an exception."""
    box, _ = sandbox
    async with TaskMcpTools([STDIO], box, workdir="/app") as mcp:
        bad = ToolCall(tool_call_id="c", function_name="mcp__facts__lookup_fact", parse_error="bad JSON")
        outcome = await mcp.call(bad, max_chars=1000)
    assert outcome.is_error and "could not parse" in outcome.content
