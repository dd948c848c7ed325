"""Plumbing in a real no-network LocalSandbox: harness -> forwarder -> unix socket -> proxy -> tiny model.

`HarnessSandbox` binds the session's proxy socket and the forwarder into the sandbox and starts the forwarder;
the tiny harness (bound in read-only) runs through `SandboxLauncher` as the unprivileged agent user.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from harness_sandbox import HarnessSandbox

from evsys.agent.harness import HarnessConfig, StdioHarnessAdapter
from evsys.records import Bind, SandboxSpec
from evsys.testing.tiny_model import DEMO_GREETING, DEMO_GREETING_REPLY

TINY_HARNESS = Path(__file__).with_name("tiny_harness.py")
HARNESS_IN_SANDBOX = "/opt/evsys-test/tiny_harness.py"

PROBE = r"""
import json, os, sys, urllib.request, urllib.error
def post(url, key):
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
    data = json.dumps(chat).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError) as e:
        return "unreachable"
print(json.dumps({name: post(url, key) for name, url, key in json.loads(sys.argv[1])}))
"""


@pytest.fixture
async def harness_sandbox(proxy):
    """A no-network sandbox with the tiny harness bound in, plumbed to a fresh session of `proxy`."""
    spec = SandboxSpec(name="harness-plumbing", binds=[Bind(src=TINY_HARNESS, dst=HARNESS_IN_SANDBOX)])
    async with HarnessSandbox(proxy, spec, model="tiny") as prepared:
        yield prepared


async def test_harness_in_sandbox_reaches_its_session_through_the_socket(harness_sandbox):
    """A full tiny-harness turn inside the sandbox is served by the proxy and recorded with token ids; no
    harness process survives stop()."""
    hs = harness_sandbox
    config = HarnessConfig(
        name="tiny-harness",
        command=["/usr/bin/python3", "-I", HARNESS_IN_SANDBOX, "--no-tools"],
        working_directory="/app",
        startup_timeout_s=30,
        session_timeout_s=120,
    )
    adapter = StdioHarnessAdapter(config, launcher=hs.launcher, endpoint=hs.endpoint)
    await adapter.start()
    assert adapter.ready_info["name"] == "tiny-harness" and "OPENAI_API_KEY" in adapter.ready_info["env"]
    turn = await adapter.send_message(DEMO_GREETING[0]["content"])
    await adapter.stop()
    assert turn.ok, turn.error
    assert turn.text == DEMO_GREETING_REPLY["content"]
    assert len(hs.session.calls) == 1 and hs.session.calls[0].completion.completion_token_ids
    left = await hs.sandbox.exec("ps -eo args= | grep -c '[t]iny_harness' || true", user="root")
    assert left.stdout.strip() == "0"


@pytest.mark.security
async def test_sandbox_reaches_only_its_own_session(proxy, harness_sandbox):
    """From inside: own key via the socket works; another session's key is refused; the host's proxy port and
    other host addresses are unreachable."""
    hs = harness_sandbox
    other = proxy.open_session()
    port = proxy.url.rsplit(":", 1)[1]
    targets = [
        ("own_key", hs.endpoint.base_url, hs.session.key),
        ("other_key", hs.endpoint.base_url, other.key),
        ("host_proxy_port", f"http://127.0.0.1:{port}", hs.session.key),
        ("host_address", "http://10.0.2.2:80", hs.session.key),
    ]
    script = f"python3 -I -c {shlex.quote(PROBE)} {shlex.quote(json.dumps(targets))}"
    result = await hs.sandbox.exec(script, timeout=120)
    assert result.ok, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {
        "own_key": 200,
        "other_key": 401,
        "host_proxy_port": "unreachable",
        "host_address": "unreachable",
    }
    assert len(hs.session.calls) == 1 and other.calls == []


async def test_closed_session_is_refused_and_its_socket_removed(proxy):
    """After the HarnessSandbox closes, the session's key is refused by the proxy and the socket is gone."""
    async with HarnessSandbox(proxy, SandboxSpec(name="harness-close")) as hs:
        key = hs.session.key
        socket_dir = hs.plumbing._dir
        assert socket_dir is not None and (socket_dir / "proxy.sock").exists()
    assert proxy.get_session(key) is None
    assert not socket_dir.exists()
