"""Plumbing in a real no-network LocalSandbox: harness -> forwarder -> unix socket -> proxy -> tiny model.

Until `SandboxSpec.binds` exists (docs/harnesses.md), the test places the session's proxy socket into the
running sandbox's /tmp through /proc/<sandbox pid>/root: the kernel object is the same as with a bind mount.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

import evsys.model.proxy.forwarder as forwarder_module
from evsys.sandbox.base import SandboxSpec
from evsys.sandbox.local import LocalSandbox
from evsys.testing.tiny_model import DEMO_GREETING, DEMO_GREETING_REPLY

TINY_HARNESS = Path(__file__).with_name("tiny_harness.py")
SOCKET_IN_SANDBOX = "/tmp/evsys-proxy.sock"

START_FORWARDER = """
python3 -I /tmp/evsys/forwarder.py --uds {sock} --listen 127.0.0.1:0 > /tmp/forwarder.out 2>&1 &
for _ in $(seq 200); do grep -q listening /tmp/forwarder.out && break; sleep 0.05; done
PORT=$(sed -n 's/^listening 127.0.0.1://p' /tmp/forwarder.out)
"""

PROBE = r"""
import json, os, sys, urllib.request, urllib.error
def post(url, key):
    url = url.replace("$PORT", os.environ["PORT"])
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


def sandbox_root(sandbox: LocalSandbox) -> Path:
    """The sandbox's root filesystem as seen from the host (the daemon's /proc root)."""
    pid = sandbox._proc.pid
    child = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0]
    return Path(f"/proc/{child}/root")


@pytest.fixture
async def sandbox():
    """A running no-network sandbox with the forwarder and the tiny harness uploaded to /tmp/evsys."""
    async with LocalSandbox(SandboxSpec(name="harness-plumbing")) as started:
        await started.upload(Path(forwarder_module.__file__), "/tmp/evsys/forwarder.py")
        await started.upload(TINY_HARNESS, "/tmp/evsys/tiny_harness.py")
        yield started


async def test_harness_in_sandbox_reaches_its_session_through_the_socket(proxy, sandbox):
    """A full tiny-harness turn inside the sandbox is served by the proxy and recorded with token ids."""
    session = proxy.open_session()
    await proxy.open_session_socket(session, str(sandbox_root(sandbox)) + SOCKET_IN_SANDBOX)
    message = json.dumps({"type": "message", "content": DEMO_GREETING[0]["content"]})
    script = START_FORWARDER.format(sock=SOCKET_IN_SANDBOX) + (
        f"printf '%s\\n' '{message}' | OPENAI_BASE_URL=http://127.0.0.1:$PORT/v1 "
        "python3 -I /tmp/evsys/tiny_harness.py --no-tools"
    )
    result = await sandbox.exec(
        script, env={"OPENAI_API_KEY": session.key, "EVSYS_MODEL": "tiny"}, timeout=120
    )
    assert result.ok, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["type"] for e in events] == ["ready", "text_output", "turn_complete"]
    assert events[1]["text"] == DEMO_GREETING_REPLY["content"]
    assert "OPENAI_API_KEY" in events[0]["env"]
    assert len(session.calls) == 1 and session.calls[0].completion.completion_token_ids


@pytest.mark.security
async def test_sandbox_reaches_only_its_own_session(proxy, sandbox):
    """From inside: own key via the socket works; another session's key is refused; the host's proxy port and
    other host addresses are unreachable."""
    mine, other = proxy.open_session(), proxy.open_session()
    await proxy.open_session_socket(mine, str(sandbox_root(sandbox)) + SOCKET_IN_SANDBOX)
    port = proxy.url.rsplit(":", 1)[1]
    targets = [
        ("own_key", "http://127.0.0.1:$PORT", mine.key),
        ("other_key", "http://127.0.0.1:$PORT", other.key),
        ("host_proxy_port", f"http://127.0.0.1:{port}", mine.key),
        ("host_address", "http://10.0.2.2:80", mine.key),
    ]
    script = START_FORWARDER.format(sock=SOCKET_IN_SANDBOX)
    script += f"PORT=$PORT python3 -I -c {shlex.quote(PROBE)} {shlex.quote(json.dumps(targets))}"
    result = await sandbox.exec(script, timeout=120)
    assert result.ok, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {
        "own_key": 200,
        "other_key": 401,
        "host_proxy_port": "unreachable",
        "host_address": "unreachable",
    }
    assert len(mine.calls) == 1 and other.calls == []
