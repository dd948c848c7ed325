"""The environment-tools MCP server at the proxy's `/mcp`: real HTTP, the official SDK client, a real sandbox.

Tools are served per proxy session (`serve_tools`), behind the same key checks as the model endpoints; the
sandbox test probes from inside a no-network LocalSandbox with a stdlib-only JSON-RPC client through the
session's forwarder."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
from pathlib import Path

import httpx2
import pytest
from harness_sandbox import HarnessSandbox
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from evsys.agent.harness import EnvTool, InjectedTool, ModelEndpoint, plan_injection
from evsys.agent.harness.adapter import mcp_servers_json
from evsys.agent.harness.mcp_server import ToolOutput, mcp_endpoint_for, serve_tools
from evsys.records import SandboxSpec

WORD_COUNT = EnvTool(
    name="word_count",
    description="Count the words of a text.",
    input_schema={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    },
)
BASH = EnvTool(
    name="bash",
    description="Run a shell command in the task's working directory.",
    input_schema={"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
)
GRADE = EnvTool(name="grade", description="Score the episode.", kind="reward")
RESET = EnvTool(name="reset", description="Restart the episode.")
HARNESS_BUILTINS = frozenset({"Bash", "Read", "Write"})


class ShellTools:
    """A small real environment: `bash` runs in a working directory, `word_count` counts words."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.seen: list[tuple[str, dict]] = []

    async def __call__(self, name: str, arguments: dict) -> ToolOutput:
        self.seen.append((name, arguments))
        if name == "word_count":
            return ToolOutput(text=str(len(arguments["text"].split())))
        if name == "bash":
            proc = await asyncio.create_subprocess_exec(
                "bash",
                "-c",
                arguments["command"],
                cwd=self.workdir,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            out, _ = await proc.communicate()
            return ToolOutput(text=out.decode(), is_error=proc.returncode != 0)
        raise LookupError(f"no such environment tool {name!r}")


def injected_tools() -> list[InjectedTool]:
    """What a harness with a `Bash` built-in sees: bash -> env_bash, reward and lifecycle tools withheld."""
    injected, withheld = plan_injection([WORD_COUNT, BASH, GRADE, RESET], HARNESS_BUILTINS)
    assert withheld == ["grade", "reset"]
    return injected


@contextlib.asynccontextmanager
async def mcp_client(url: str, key: str, *, uds: str | None = None, mode: str = "auto"):
    """The official SDK client over Streamable HTTP with the session key as bearer token."""
    transport = httpx2.AsyncHTTPTransport(uds=uds) if uds else None
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(headers=headers, transport=transport, timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            yield client


async def raw_post(url: str, key: str, body: dict, *, uds: str | None = None) -> httpx2.Response:
    """One JSON-RPC POST without any MCP client logic."""
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    transport = httpx2.AsyncHTTPTransport(uds=uds) if uds else None
    async with httpx2.AsyncClient(transport=transport, timeout=30) as http:
        return await http.post(url, json=body, headers=headers)


LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


@pytest.fixture
def env_tools(tmp_path) -> ShellTools:
    """The environment's tool handler, working in a temp directory."""
    (tmp_path / "notes.txt").write_text("alpha beta\n")
    return ShellTools(tmp_path)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_lists_exactly_the_injected_tools_under_their_exposed_names(proxy, env_tools, mode):
    """Both protocol eras (2026 discover, initialize handshake) list the domain tools only, `bash` as
    `env_bash`, with the environment's descriptions and schemas."""
    session = proxy.open_session()
    serve_tools(session, injected_tools(), env_tools)
    async with mcp_client(f"{proxy.url}/mcp", session.key, mode=mode) as client:
        listed = (await client.list_tools()).tools
    assert {t.name: t.description for t in listed} == {
        "word_count": WORD_COUNT.description,
        "env_bash": BASH.description,
    }
    assert next(t for t in listed if t.name == "word_count").input_schema == WORD_COUNT.input_schema
    assert session.tool_calls == []


async def test_call_is_routed_to_the_environment_name_and_recorded(proxy, env_tools):
    """`env_bash` reaches the environment's `bash`; the output comes back and the call is on the session."""
    session = proxy.open_session()
    server = serve_tools(session, injected_tools(), env_tools)
    assert server.tool_mapping() == {"word_count": "word_count", "env_bash": "bash"}
    async with mcp_client(f"{proxy.url}/mcp", session.key, mode="legacy") as client:
        result = await client.call_tool("env_bash", {"command": "cat notes.txt"})
        failed = await client.call_tool("env_bash", {"command": "ls missing-file"})
    assert not result.is_error and result.content[0].text == "alpha beta\n"
    assert failed.is_error and "missing-file" in failed.content[0].text
    assert env_tools.seen == [
        ("bash", {"command": "cat notes.txt"}),
        ("bash", {"command": "ls missing-file"}),
    ]
    first, second = session.tool_calls
    assert (first.index, first.name, first.tool, first.arguments) == (
        0,
        "env_bash",
        "bash",
        {"command": "cat notes.txt"},
    )
    assert first.output == "alpha beta\n" and not first.is_error and first.error is None
    assert first.duration_s > 0 and first.started_at
    assert second.is_error and second.error is None  # the tool itself failed; evsys did not refuse it


async def test_bad_arguments_get_a_clear_error_result_and_never_reach_the_environment(proxy, env_tools):
    """Wrong type, missing and unexpected arguments: an is_error result naming the tool and the problem."""
    session = proxy.open_session()
    serve_tools(session, injected_tools(), env_tools)
    async with mcp_client(f"{proxy.url}/mcp", session.key) as client:
        wrong_type = await client.call_tool("word_count", {"text": 5})
        missing = await client.call_tool("word_count", {})
        extra = await client.call_tool("word_count", {"text": "a b", "lang": "en"})
        good = await client.call_tool("word_count", {"text": "one two three"})
    assert wrong_type.is_error
    assert wrong_type.content[0].text == (
        "invalid arguments for tool 'word_count': 5 is not of type 'string' (at 'text')"
    )
    assert missing.is_error and "'text' is a required property" in missing.content[0].text
    assert extra.is_error and "'lang' was unexpected" in extra.content[0].text
    assert not good.is_error and good.content[0].text == "3"
    assert env_tools.seen == [("word_count", {"text": "one two three"})]
    assert [c.error is not None for c in session.tool_calls] == [True, True, True, False]


async def test_withheld_and_unknown_tools_are_refused(proxy, env_tools):
    """Reward, lifecycle, the unprefixed environment name and made-up names are JSON-RPC errors; recorded."""
    session = proxy.open_session()
    serve_tools(session, injected_tools(), env_tools)
    async with mcp_client(f"{proxy.url}/mcp", session.key, mode="legacy") as client:
        for name in ("grade", "reset", "bash", "rm_rf"):
            with pytest.raises(MCPError) as refused:
                await client.call_tool(name, {})
            assert refused.value.code == -32602
            assert refused.value.message == (
                f"unknown tool {name!r}: this session serves ['env_bash', 'word_count']"
            )
    assert env_tools.seen == []
    assert [(c.name, c.tool, c.is_error) for c in session.tool_calls] == [
        ("grade", "", True),
        ("reset", "", True),
        ("bash", "", True),
        ("rm_rf", "", True),
    ]


async def test_a_failing_tool_is_an_error_result_and_the_server_keeps_serving(proxy, tmp_path):
    """A handler that raises gives the harness an error result naming the failure; the next call works."""

    async def handler(name: str, arguments: dict) -> ToolOutput:
        if arguments["text"] == "boom":
            raise RuntimeError("the environment's database is gone")
        return ToolOutput(text="fine")

    session = proxy.open_session()
    serve_tools(session, [InjectedTool(exposed_name="word_count", tool=WORD_COUNT)], handler)
    async with mcp_client(f"{proxy.url}/mcp", session.key) as client:
        failed = await client.call_tool("word_count", {"text": "boom"})
        after = await client.call_tool("word_count", {"text": "ok"})
    assert failed.is_error
    assert failed.content[0].text == (
        "tool 'word_count' failed: RuntimeError: the environment's database is gone"
    )
    assert session.tool_calls[0].error == failed.content[0].text
    assert not after.is_error and after.content[0].text == "fine"


async def test_wrong_or_missing_key_is_refused_with_401(proxy, env_tools):
    """A key that belongs to no open session gets 401 and a JSON-RPC error body; so does no key."""
    session = proxy.open_session()
    serve_tools(session, injected_tools(), env_tools)
    wrong = await raw_post(f"{proxy.url}/mcp", "evsys-not-a-session", LIST_TOOLS)
    assert wrong.status_code == 401
    assert wrong.json()["error"]["message"].startswith("invalid API key")
    assert (await raw_post(f"{proxy.url}/mcp", "", LIST_TOOLS)).status_code == 401
    refused = pytest.RaisesExc(MCPError, match="^invalid API key: this key does not belong")
    with pytest.RaisesGroup(refused, flatten_subgroups=True):  # the SDK client wraps it in task groups
        async with mcp_client(f"{proxy.url}/mcp", "evsys-not-a-session", mode="legacy") as client:
            await client.list_tools()
    assert session.tool_calls == []


async def test_only_json_rpc_posts_are_served(proxy, env_tools):
    """GET (event stream) and DELETE get 405 (stateless server); a body that is not JSON gets a 400 JSON-RPC
    parse error, and the server goes on serving."""
    session = proxy.open_session()
    serve_tools(session, injected_tools(), env_tools)
    auth = {"Authorization": f"Bearer {session.key}", "Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(timeout=30) as http:
        for method in ("GET", "DELETE"):
            refused = await http.request(method, f"{proxy.url}/mcp", headers=auth)
            assert (refused.status_code, refused.headers["allow"]) == (405, "POST")
        garbage = await http.post(
            f"{proxy.url}/mcp", headers={**auth, "Content-Type": "application/json"}, content=b"{not json"
        )
        assert garbage.status_code == 400 and garbage.json()["error"]["code"] == -32700
    listed = await raw_post(f"{proxy.url}/mcp", session.key, LIST_TOOLS)
    assert sorted(t["name"] for t in listed.json()["result"]["tools"]) == ["env_bash", "word_count"]


async def test_another_sessions_key_is_refused_on_this_sessions_socket(proxy, env_tools, tmp_path):
    """On session A's own unix socket, session B's (valid) key is refused; A's key works there."""
    mine, other = proxy.open_session(), proxy.open_session()
    serve_tools(mine, injected_tools(), env_tools)
    serve_tools(other, injected_tools(), env_tools)
    sock = str(await proxy.open_session_socket(mine, tmp_path / "mine.sock"))
    refused = await raw_post("http://localhost/mcp", other.key, LIST_TOOLS, uds=sock)
    assert refused.status_code == 401
    async with mcp_client("http://localhost/mcp", mine.key, uds=sock) as client:
        result = await client.call_tool("word_count", {"text": "through the socket"})
    assert result.content[0].text == "3"
    assert len(mine.tool_calls) == 1 and other.tool_calls == []


async def test_each_session_sees_only_its_own_tools(proxy, env_tools):
    """A session with an empty tool set lists none; a session with no tool server gets a clear 404; a
    session closed later is refused."""
    full, empty, bare = proxy.open_session(), proxy.open_session(), proxy.open_session()
    serve_tools(full, injected_tools(), env_tools)
    serve_tools(empty, [], env_tools)
    async with mcp_client(f"{proxy.url}/mcp", empty.key) as client:
        assert (await client.list_tools()).tools == []
        with pytest.raises(MCPError, match="this session serves no tools"):
            await client.call_tool("word_count", {"text": "x"})
    missing = await raw_post(f"{proxy.url}/mcp", bare.key, LIST_TOOLS)
    assert missing.status_code == 404
    assert "serves no environment tools" in missing.json()["error"]["message"]
    async with mcp_client(f"{proxy.url}/mcp", full.key) as client:
        assert len((await client.list_tools()).tools) == 2
    server = full.mcp_app
    proxy.close_session(full.key)
    assert (await raw_post(f"{proxy.url}/mcp", full.key, LIST_TOOLS)).status_code == 401
    await asyncio.sleep(0)  # the proxy stops the closed session's tool server in the background
    await server._task
    assert env_tools.seen == []


def test_serve_tools_refuses_tools_that_must_not_reach_a_harness(proxy, env_tools):
    """Reward/lifecycle tools, reserved or duplicate exposed names and non-object or invalid schemas."""
    session = proxy.open_session()
    cases = {
        "grade": (GRADE, "tool 'grade' (reward) must never be served to a harness"),
        "reset": (RESET, "tool 'reset' (domain) must never be served to a harness"),
        "state": (EnvTool(name="lookup"), "exposed name 'state' is reserved"),
        "flat": (EnvTool(name="flat", input_schema={"type": "string"}), '"type": "object" at its root'),
        "odd": (
            EnvTool(name="odd", input_schema={"type": "object", "properties": {"n": {"type": "nope"}}}),
            "tool 'odd': input_schema is not a valid JSON Schema",
        ),
    }
    for exposed, (tool, message) in cases.items():
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            serve_tools(session, [InjectedTool(exposed_name=exposed, tool=tool)], env_tools)
    twice = [InjectedTool(exposed_name="wc", tool=WORD_COUNT), InjectedTool(exposed_name="wc", tool=BASH)]
    with pytest.raises(ValueError, match="two tools are exposed as 'wc'"):
        serve_tools(session, twice, env_tools)
    proxy.close_session(session.key)
    with pytest.raises(ValueError, match="closed proxy session"):
        serve_tools(session, [], env_tools)
    assert session.mcp_app is None


def test_mcp_endpoint_of_a_harness_session_goes_into_its_config(proxy):
    """`<base_url>/mcp` with the session key as bearer token, in the `mcpServers` file harnesses read."""
    session = proxy.open_session()
    endpoint = ModelEndpoint("http://127.0.0.1:8765/", session.key, "tiny", session)
    mcp = mcp_endpoint_for(endpoint)
    assert mcp.url == "http://127.0.0.1:8765/mcp"
    assert mcp.headers == {"Authorization": f"Bearer {session.key}"}
    server = json.loads(mcp_servers_json(mcp))["mcpServers"]["evsys-env"]
    assert server == {"type": "http", "url": mcp.url, "headers": mcp.headers}


PROBE = r"""
import json, sys, urllib.request, urllib.error

def rpc(url, key, method, params=None, ident=1):
    body = {"jsonrpc": "2.0", "method": method, "params": params or {}}
    if ident is not None:
        body["id"] = ident
    headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    req = urllib.request.Request(url + "/mcp", data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            text = r.read().decode()
            return r.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        return e.code, None
    except (urllib.error.URLError, OSError):
        return "unreachable", None

def session_view(url, key):
    status, init = rpc(url, key, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                                 "clientInfo": {"name": "probe", "version": "0"}})
    if status != 200:
        return status
    rpc(url, key, "notifications/initialized", ident=None)
    _, listed = rpc(url, key, "tools/list", ident=2)
    _, called = rpc(url, key, "tools/call", {"name": "list_files", "arguments": {"path": "/app"}}, ident=3)
    _, refused = rpc(url, key, "tools/call", {"name": "grade", "arguments": {}}, ident=4)
    return {"server": init["result"]["serverInfo"]["name"],
            "tools": [t["name"] for t in listed["result"]["tools"]],
            "call": called["result"]["content"][0]["text"], "call_error": called["result"]["isError"],
            "refused": refused["error"]["code"]}

print(json.dumps({name: session_view(url, key) for name, url, key in json.loads(sys.argv[1])}))
"""


@pytest.mark.security
async def test_sandbox_reaches_only_its_own_sessions_tools(proxy):
    """From inside a no-network sandbox, through the forwarder: the own key initializes, lists and calls
    (the call runs in the sandbox); another session's key is refused; the host's proxy port and other host
    addresses are unreachable."""
    async with HarnessSandbox(proxy, SandboxSpec(name="harness-mcp")) as hs:
        await hs.sandbox.exec("echo hi > /app/from-env.txt", user="agent")

        async def in_sandbox(name: str, arguments: dict) -> ToolOutput:
            result = await hs.sandbox.exec(f"ls {shlex.quote(arguments['path'])}", user="agent")
            return ToolOutput(text=result.stdout, is_error=not result.ok)

        list_files = EnvTool(
            name="list_files",
            input_schema={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        )
        injected, _ = plan_injection([list_files, GRADE], HARNESS_BUILTINS)
        serve_tools(hs.session, injected, in_sandbox)
        other = proxy.open_session()
        serve_tools(other, injected, in_sandbox)
        port = proxy.url.rsplit(":", 1)[1]
        base = hs.endpoint.base_url
        assert mcp_endpoint_for(hs.endpoint).url == f"{base}/mcp"
        targets = [
            ("own_key", base, hs.session.key),
            ("other_key", base, other.key),
            ("host_proxy_port", f"http://127.0.0.1:{port}", hs.session.key),
            ("host_address", "http://10.0.2.2:80", hs.session.key),
        ]
        script = f"python3 -I -c {shlex.quote(PROBE)} {shlex.quote(json.dumps(targets))}"
        result = await hs.sandbox.exec(script, user="agent", timeout=120)
        assert result.ok, result.stderr
        seen = json.loads(result.stdout.strip().splitlines()[-1])
        assert seen == {
            "own_key": {
                "server": "evsys-env",
                "tools": ["list_files"],
                "call": "from-env.txt\n",
                "call_error": False,
                "refused": -32602,
            },
            "other_key": 401,
            "host_proxy_port": "unreachable",
            "host_address": "unreachable",
        }
        assert [(c.name, c.is_error) for c in hs.session.tool_calls] == [
            ("list_files", False),
            ("grade", True),
        ]
        assert other.tool_calls == []
