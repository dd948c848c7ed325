"""A harness sandbox attacking its own proxy session from inside a real no-network sandbox, as the agent user:
thousands of connections that never finish a request, a 1 GiB request body, a flood of JSON bodies. The
orchestrator (this process) keeps its descriptors and memory, and another session and a result write still
work."""

from __future__ import annotations

import asyncio
import json
import os

import httpx
import psutil
import pytest
from harness_sandbox import HarnessSandbox

from evsys.engine import JobStore
from evsys.model.proxy.intake import BodyBudget
from evsys.model.proxy.server import SESSION_LIMITS
from evsys.records import PhaseTimings, SandboxSpec, TrialResult
from load_attacks import reset_peak_memory, vm_status
from stored_trials import write_finished

pytestmark = [pytest.mark.slow, pytest.mark.security]

SOCKET = "/run/evsys/proxy.sock"
HOLD = f"""
import json, socket, sys, time
held, refused = [], 0
for _ in range(3000):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect("{SOCKET}")
    except OSError:
        s.close(); refused += 1; continue
    try:
        s.send(b"POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\n")
    except OSError:
        pass
    held.append(s)
print(json.dumps({{"held": len(held), "refused": refused}}), flush=True)
time.sleep(300)
"""
FLOOD = f"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("{SOCKET}")
head = "POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\nAuthorization: Bearer " + sys.argv[1]
s.sendall((head + "\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n").encode())
chunk, sent = b"100000\\r\\n" + b"[" * 0x100000 + b"\\r\\n", 0
try:
    while sent < 1 << 30:
        s.sendall(chunk)
        sent += 0x100000
except OSError:
    pass
reply = b""
try:
    while data := s.recv(65536):
        reply += data
except OSError:
    pass
print(json.dumps({{"sent": sent, "status": reply.split(b" ")[1].decode() if reply else None}}))
"""

# eight requests at once, each a body just under the 32 MiB limit of `[{},{},...]`
JSON_FLOOD = f"""
import json, socket, sys, threading
body = b"[" + b"{{}}," * ((32 * 2**20 - 1026) // 3) + b"{{}}]"
head = "POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\nAuthorization: Bearer "
head = (head + sys.argv[1] + "\\r\\nContent-Length: " + str(len(body)) + "\\r\\n\\r\\n").encode()
out = [None] * 8
def post(i):
    s, sent, reply = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), 0, b""
    s.connect("{SOCKET}")
    try:
        s.sendall(head)
        while sent < len(body):
            sent += s.send(memoryview(body)[sent : sent + 2**20])
    except OSError:
        pass
    try:
        while data := s.recv(65536):
            reply += data
    except OSError:
        pass
    out[i] = {{"sent": sent, "status": reply.split(b" ")[1].decode() if reply else None}}
threads = [threading.Thread(target=post, args=(i,)) for i in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
print(json.dumps(out))
"""


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
async def attacked(proxy):
    """A no-network sandbox plumbed to a fresh session of `proxy`."""
    async with HarnessSandbox(proxy, SandboxSpec(name="proxy-load"), model="tiny") as prepared:
        yield prepared


async def test_half_open_connections_from_a_sandbox_cost_one_sessions_cap(proxy, attacked, tmp_path):
    before = open_descriptors()
    attacker = await attacked.sandbox.spawn(["/usr/bin/python3", "-I", "-c", HOLD], user="agent")
    try:
        report = json.loads(await asyncio.wait_for(attacker.stdout.readline(), 120))
        cap = SESSION_LIMITS.max_connections
        # the attack ran: the session's cap is taken, the listen queue full, thousands more refused
        assert report["held"] >= cap and report["refused"] > 2000
        assert cap <= open_descriptors() - before <= cap + 16
        other = proxy.open_session()
        async with httpx.AsyncClient(base_url=proxy.url, timeout=60) as http:
            chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            answer = await http.post("/v1/chat/completions", json=chat, headers={"x-api-key": other.key})
        assert answer.status_code == 200
        result = TrialResult(
            trial_name="innocent__1", task_name="t", task_path="/t", dataset="d", agent="a", attempt=1,
            timing=PhaseTimings(),
        )  # fmt: skip
        await write_finished(JobStore(tmp_path / "job"), result)
        assert (
            json.loads((tmp_path / "job/innocent__1/result.json").read_text())["trial_name"] == "innocent__1"
        )
    finally:
        await attacker.kill()


async def test_a_huge_body_from_a_sandbox_is_refused_and_memory_stays_bounded(attacked):
    me = psutil.Process()
    before, peak = me.memory_info().rss, 0

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, me.memory_info().rss - before)
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    try:
        done = await attacked.sandbox.exec(
            f"/usr/bin/python3 -I -c '{FLOOD}' {attacked.session.key}", user="agent", timeout=300
        )
    finally:
        sampler.cancel()
    report = json.loads(done.stdout)
    assert report["sent"] >= 32 << 20  # the attack ran: the proxy read up to its limit before refusing
    assert report["status"] == "413" and report["sent"] < 1 << 30
    assert peak < 200 << 20


async def test_a_json_flood_from_a_sandbox_is_refused_while_another_session_is_answered(proxy, attacked):
    other, answers = proxy.open_session(), []
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

    async def innocent() -> None:
        async with httpx.AsyncClient(base_url=proxy.url, timeout=120) as http:
            while True:
                answer = await http.post("/v1/chat/completions", json=chat, headers={"x-api-key": other.key})
                answers.append(answer.status_code)

    await innocent_once(proxy, other.key, chat)  # the model is loaded before memory is measured
    reset_peak_memory(os.getpid())
    before = vm_status(os.getpid())["VmRSS"]
    bystander = asyncio.create_task(innocent())
    try:
        done = await attacked.sandbox.exec(
            f"/usr/bin/python3 -I -c '{JSON_FLOOD}' {attacked.session.key}", user="agent", timeout=300
        )
        answered_during = len(answers)
    finally:
        bystander.cancel()
    growth = vm_status(os.getpid())["VmHWM"] - before
    report = json.loads(done.stdout)
    # the attack ran: every request was answered, and the proxy read bodies up to the session's budget
    assert len(report) == 8 and sum(r["sent"] for r in report) >= BodyBudget().max_bytes, report
    assert {r["status"] for r in report} <= {"413", "429"}, report
    assert answered_during >= 1 and set(answers) == {200}, answers  # the other session, answered meanwhile
    assert growth < 3 * BodyBudget().max_bytes and not attacked.session.calls, growth


async def innocent_once(proxy, key: str, chat: dict) -> None:
    async with httpx.AsyncClient(base_url=proxy.url, timeout=120) as http:
        answer = await http.post("/v1/chat/completions", json=chat, headers={"x-api-key": key})
    assert answer.status_code == 200
