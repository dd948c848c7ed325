"""A sandbox loading the recording model proxy: a huge request body, a flood of JSON bodies, thousands of
connections that never finish a request, descriptors run nearly out. The proxy runs in its own process, so
its memory and descriptors are measured as they are."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from evsys.model.proxy.intake import BodyBudget
from load_attacks import (
    connect,
    empty_objects,
    flood_beside,
    half_open,
    open_descriptors,
    post_raw,
    stream_body,
)

PROXY_PROCESS = Path(__file__).with_name("proxy_process.py")
GIB = 1 << 30
MIB = 1 << 20
BODY_LIMIT = 32 * MIB  # the proxy's default
RSS_BOUND = 200 * MIB
# a JSON flood from one session: its bodies in flight (at most its byte budget, 64 MiB) are held twice while
# they are assembled (the bytes read, with a bytearray's slack, and the joined body): ~140 MiB; plus one parse
# at the JSON value limit (~20 MiB), thread stacks and the allocator's slack. Measured: +67 to +116 MiB.
FLOOD_RSS_BOUND = 3 * BodyBudget().max_bytes
CHAT_BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()

pytestmark = pytest.mark.slow


class ProxyProcess:
    """`proxy_process.py` running: its info line, commands on stdin, stderr in a file."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.stderr_path = tmp_path / "proxy.stderr"
        self.process = subprocess.Popen(
            [sys.executable, str(PROXY_PROCESS), str(tmp_path), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr_path.open("w"),
            text=True,
        )
        line = self.process.stdout.readline()
        assert line, self.stderr_path.read_text()
        info = json.loads(line)
        self.pid, self.url, self.keys, self.sockets = info["pid"], info["url"], info["keys"], info["sockets"]

    @property
    def tcp(self) -> tuple[str, int]:
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        return host, int(port)

    def write_result(self, job_dir: Path, trial: str) -> str:
        """Have the proxy's process write a trial's result.json through JobStore."""
        self.process.stdin.write(f"write {job_dir} {trial}\n")
        self.process.stdin.flush()
        return self.process.stdout.readline().strip()

    def chat(self, session: int) -> httpx.Response:
        """One chat completion on session `session`'s own socket."""
        transport = httpx.HTTPTransport(uds=self.sockets[session])
        with httpx.Client(transport=transport, base_url="http://proxy", timeout=60) as client:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            return client.post("/v1/chat/completions", json=body, headers=self.auth(session))

    def auth(self, session: int) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[session]}"}

    def stop(self) -> None:
        self.process.stdin.write("quit\n")
        self.process.stdin.flush()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture
def proxy_process(tmp_path, request):
    started = ProxyProcess(tmp_path, *getattr(request, "param", ()))
    yield started
    started.stop()


def wait_until(predicate, what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("where", "path"),
    [("tcp", "/v1/chat/completions"), ("session", "/v1/messages"), ("session", "/mcp")],
)
def test_a_huge_body_is_refused_while_it_is_read_and_memory_stays_bounded(proxy_process, where, path):
    address = proxy_process.tcp if where == "tcp" else proxy_process.sockets[0]
    auth = proxy_process.auth(0)
    # control: a body under the limit is read whole (answered as invalid JSON, or as too many JSON values: a
    # MiB of `[`), not refused as too large while it is read
    under = stream_body(address, path, MIB, pid=proxy_process.pid, headers=auth)
    assert under.status in (400, 404) or b"JSON of about 1,048,577 values" in under.response, under.response
    chunked = stream_body(address, path, GIB, pid=proxy_process.pid, headers=auth)
    assert chunked.sent >= BODY_LIMIT  # the attack ran: the proxy read past its limit before refusing
    assert chunked.status == 413, chunked.response[:300]
    assert chunked.sent < GIB and chunked.rss_growth < RSS_BOUND
    declared = stream_body(address, path, GIB, pid=proxy_process.pid, headers=auth, declared=True)
    assert declared.status == 413 and declared.sent < GIB and declared.rss_growth < RSS_BOUND
    assert b"over the limit of 33,554,432 bytes" in chunked.response + declared.response
    assert proxy_process.chat(0).status_code == 200


@pytest.mark.parametrize("proxy_process", [(), ("--unbounded",)], indirect=True, ids=["budget", "unbounded"])
def test_a_json_flood_is_refused_while_another_session_is_answered(proxy_process):
    """Eight bodies at once from one session, each just under the body limit, of `[{},{},...]`."""
    flood_body = empty_objects(BODY_LIMIT - 1022)
    path, auth = "/v1/chat/completions", proxy_process.auth

    def attack():
        return post_raw(proxy_process.sockets[0], path, flood_body, auth(0))

    def innocent():
        return post_raw(proxy_process.sockets[1], path, CHAT_BODY, auth(1))

    flood = flood_beside(attack, 8, innocent, proxy_process.pid)
    # both ways, the other session's calls are answered, and some while the attack is still running
    assert {reply.status for _, reply in flood.innocent} == {200}
    assert min(reply.at for _, reply in flood.innocent) < flood.last_attack_reply
    statuses = {reply.status for reply in flood.attack}
    if "--unbounded" in proxy_process.process.args:  # the control: every body is parsed whole
        assert statuses == {400} and flood.rss_growth > 4 * FLOOD_RSS_BOUND, flood.rss_growth
        return
    assert statuses <= {413, 429} and flood.rss_growth < FLOOD_RSS_BOUND, (statuses, flood.rss_growth)


@pytest.mark.parametrize(
    "proxy_process", [("--session-connections", "32", "--header-timeout", "3")], indirect=True
)
def test_half_open_connections_are_capped_per_session_and_another_session_still_works(
    proxy_process, tmp_path
):
    baseline = open_descriptors(proxy_process.pid)
    flood = half_open(proxy_process.sockets[0], 2000)
    try:
        # the attack ran: the proxy accepted as many as one session may hold, and the rest were held off
        wait_until(lambda: open_descriptors(proxy_process.pid) >= baseline + 32, "32 connections accepted")
        assert len(flood.sockets) + flood.refused == 2000 and flood.refused > 1000
        assert open_descriptors(proxy_process.pid) <= baseline + 32 + 4
        innocent = proxy_process.chat(1)
        assert innocent.status_code == 200 and "still answers" in innocent.text
        assert proxy_process.write_result(tmp_path / "job", "innocent__1") == "ok"
        assert json.loads((tmp_path / "job/innocent__1/result.json").read_text())["agent"] == "innocent"
        # unfinished headers time out: the proxy closes those connections itself
        wait_until(lambda: flood.closed_by_server() >= 32, "the header timeout closed the held connections")
    finally:
        flood.close()
    assert proxy_process.chat(0).status_code == 200  # the attacking session works again once it stops


# a descriptor limit small enough to exhaust, no cap per session, connections held for as long as it takes
EXHAUSTING = ("--nofile", "400", "--session-connections", "5000", "--header-timeout", "300")


@pytest.mark.parametrize(
    ("proxy_process", "reserve"),
    [((*EXHAUSTING,), True), ((*EXHAUSTING, "--no-reserve"), False)],
    indirect=["proxy_process"],
)  # fmt: skip
def test_an_innocent_result_is_written_with_descriptors_nearly_exhausted(proxy_process, tmp_path, reserve):
    flood = half_open(proxy_process.sockets[0], 700, patience=20)
    try:
        wait_until(lambda: open_descriptors(proxy_process.pid) >= 400 - 128 - 8, "descriptors nearly used up")
        answer = proxy_process.write_result(tmp_path / "job", "innocent__1")
        if not reserve:  # the positive control: without the reserve, the flood takes every descriptor
            assert "Too many open files" in answer
            return
        assert answer == "ok"
        assert (
            json.loads((tmp_path / "job/innocent__1/result.json").read_text())["trial_name"] == "innocent__1"
        )
        refused = flood.closed_by_server()
        log = proxy_process.stderr_path.read_text()
    finally:
        flood.close()
    assert refused > 50  # many connections were refused at the reserve ...
    assert 1 <= log.count("few descriptors left") <= 3  # ... and the log says so in a line or two


def test_a_body_that_stalls_gets_408_and_the_app_never_runs(serve_app):
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from evsys.util.bodylimit import BodyLimit

    reached = []

    async def echo(request):
        reached.append(await request.body())
        return PlainTextResponse("read")

    app = BodyLimit(Starlette(routes=[Route("/", echo, methods=["POST"])]), 1000, idle_timeout=1)
    with serve_app(app) as url:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        sock = connect((host, int(port)))
        sock.settimeout(30)
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
        stalled = sock.recv(65536)
        sock.close()
        whole = httpx.post(url, content=b"y" * 1000)
    assert stalled.startswith(b"HTTP/1.1 408") and b"connection: close" in stalled.lower()
    assert whole.text == "read" and reached == [b"y" * 1000]  # the control: a whole body under the limit
