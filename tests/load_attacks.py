"""What a hostile sandbox does to a server it can reach, as test helpers: stream a huge request body, open
many connections that never finish their request headers. Each reports what it did, so a test can prove
the attack ran before asserting that it failed."""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import psutil

CHUNK = 1 << 20


@dataclass
class BodyFlood:
    """What `stream_body` did: bytes of body sent, the server's response, the server's peak RSS growth."""

    sent: int = 0
    response: bytes = b""
    rss_growth: int = 0

    @property
    def status(self) -> int | None:
        """The HTTP status of the response, if one came."""
        parts = self.response.split(b" ", 2)
        return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def connect(address: str | tuple[str, int]) -> socket.socket:
    """A connected stream socket to a unix socket path or a (host, port)."""
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.connect(address)
    return sock


def stream_body(
    address: str | tuple[str, int],
    path: str,
    total: int,
    *,
    pid: int,
    headers: dict[str, str] | None = None,
    declared: bool = False,
) -> BodyFlood:
    """POST `path` with a `total`-byte body (chunked, or with its Content-Length when `declared`), sending
    until the server answers or closes; samples the RSS of process `pid` all along."""
    server = psutil.Process(pid)
    before = server.memory_info().rss
    flood = BodyFlood()
    lines = [f"POST {path} HTTP/1.1", "Host: localhost", "Content-Type: application/json"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    lines += [f"Content-Length: {total}" if declared else "Transfer-Encoding: chunked"]
    sock = connect(address)
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    sock.setblocking(False)
    piece = b"[" * CHUNK if declared else b"%x\r\n" % CHUNK + b"[" * CHUNK + b"\r\n"
    pending = b""
    try:
        while flood.sent < total:
            readable, writable, _ = select.select([sock], [sock], [], 30)
            if readable:
                break
            if not writable:
                raise AssertionError("the server neither reads nor answers")
            pending = pending or piece
            try:
                pending = pending[sock.send(pending) :]
            except OSError:
                break
            if not pending:
                flood.sent += CHUNK
            if flood.sent % (16 * CHUNK) == 0:
                flood.rss_growth = max(flood.rss_growth, server.memory_info().rss - before)
        else:
            if not declared:
                sock.setblocking(True)
                sock.sendall(b"0\r\n\r\n")
        flood.response = _read_all(sock)
    finally:
        sock.close()
    flood.rss_growth = max(flood.rss_growth, server.memory_info().rss - before)
    return flood


def _read_all(sock: socket.socket, limit: float = 60.0) -> bytes:
    """Everything the server sends until it closes (or `limit` seconds pass)."""
    data = b""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        readable, _, _ = select.select([sock], [], [], 1)
        if not readable:
            continue
        try:
            chunk = sock.recv(65536)
        except BlockingIOError:
            continue
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return data


@dataclass
class HalfOpen:
    """Connections that sent the start of a request and nothing more."""

    sockets: list[socket.socket] = field(default_factory=list)
    refused: int = 0  # the listen queue was full: connect() would have blocked

    def closed_by_server(self) -> int:
        """How many of them the server has closed."""
        closed = 0
        for sock in self.sockets:
            try:
                if sock.recv(1, socket.MSG_PEEK) == b"":
                    closed += 1
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        return closed

    def close(self) -> None:
        """Close every connection."""
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.close()
        self.sockets.clear()


def half_open(path: str, count: int, *, patience: float = 0.0) -> HalfOpen:
    """Open `count` connections to the unix socket `path`, each sending an unfinished request. When the
    listen queue is full, retry for up to `patience` seconds in all, then count the attempt as refused."""
    opened = HalfOpen()
    deadline = time.monotonic() + patience
    while len(opened.sockets) + opened.refused < count:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(path)
        except OSError as exc:
            sock.close()
            if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                raise
            if time.monotonic() < deadline:
                time.sleep(0.005)
            else:
                opened.refused += 1
            continue
        with contextlib.suppress(OSError):
            sock.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        opened.sockets.append(sock)
    return opened


def open_descriptors(pid: int) -> int:
    """How many descriptors process `pid` has open."""
    return psutil.Process(pid).num_fds()


def empty_objects(size: int) -> bytes:
    """A JSON array of empty objects, `[{},{},...]`, exactly `size` bytes long (size >= 4, size % 3 == 1):
    the most Python objects a body of that size can make."""
    return b"[" + b"{}," * ((size - 4) // 3) + b"{}]"


@dataclass
class Reply:
    """One request's answer: its status (None: no answer), when it came (time.monotonic()), its bytes."""

    status: int | None
    at: float
    raw: bytes = b""

    @property
    def text(self) -> str:
        """The response (head and body) as text."""
        return self.raw.decode(errors="replace")


def post_raw(address: str | tuple[str, int], path: str, body: bytes, headers: dict[str, str]) -> Reply:
    """POST `body` (with its Content-Length) and read the answer until the server closes; never raises for
    a refused or reset connection (the status is then whatever arrived, or None)."""
    return HeldPost(address, path, body, headers, len(body)).finish()


class HeldPost:
    """A POST (with its Content-Length) of which only the headers and the first `send` bytes of the body
    have been sent: the server holds it open, waiting for the rest, until `finish()`."""

    def __init__(
        self, address: str | tuple[str, int], path: str, body: bytes, headers: dict[str, str], send: int
    ) -> None:
        lines = [f"POST {path} HTTP/1.1", "Host: localhost", "Content-Type: application/json"]
        lines.append("Connection: close")
        lines += [f"{k}: {v}" for k, v in headers.items()] + [f"Content-Length: {len(body)}"]
        self.rest = body[send:]
        self.sock = connect(address)
        self._send(("\r\n".join(lines) + "\r\n\r\n").encode() + body[:send])

    def _send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            pass  # refused mid-body: the answer may still be waiting

    def finish(self) -> Reply:
        """Send the rest of the body and read the answer until the server closes."""
        self._send(self.rest)
        try:
            self.sock.setblocking(False)
            response = _read_all(self.sock, limit=600.0)
        finally:
            self.sock.close()
        return Reply(BodyFlood(response=response).status, time.monotonic(), response)


def reset_peak_memory(pid: int) -> None:
    """Reset process `pid`'s `VmHWM` to its resident memory now (Linux `clear_refs`), so a later
    `vm_status` reports the peak since this call."""
    with open(f"/proc/{pid}/clear_refs", "w") as clear:
        clear.write("5")


def vm_status(pid: int) -> dict[str, int]:
    """Process `pid`'s resident memory now (`VmRSS`) and at its peak so far (`VmHWM`), in bytes."""
    fields = {}
    for line in open(f"/proc/{pid}/status").read().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) * 1024
    return fields


@dataclass
class Flood:
    """What `flood_beside` saw: the attack's replies, an innocent client's calls made meanwhile (each as
    (sent at, reply)), the server's resident memory before and its peak after, all times time.monotonic()."""

    started: float
    attack: list[Reply]
    innocent: list[tuple[float, Reply]]
    rss_before: int
    peak_after: int

    @property
    def last_attack_reply(self) -> float:
        """When the attack's last answer came."""
        return max(r.at for r in self.attack)

    @property
    def rss_growth(self) -> int:
        """How far the server's peak resident memory rose above where it stood before the attack."""
        return self.peak_after - self.rss_before

    def innocent_waits(self) -> list[float]:
        """How long each innocent call waited for its answer, in seconds."""
        return [reply.at - sent for sent, reply in self.innocent]


def flood_beside(attack: Callable[[], Reply], count: int, innocent: Callable[[], Reply], pid: int) -> Flood:
    """Run `count` copies of `attack` at once and, until they are all answered, `innocent` calls one after
    another; measure server process `pid`'s memory around it."""
    reset_peak_memory(pid)
    rss_before = vm_status(pid)["VmRSS"]
    started = time.monotonic()
    calls: list[tuple[float, Reply]] = []
    with ThreadPoolExecutor(count) as pool:
        attacks = [pool.submit(attack) for _ in range(count)]
        while not all(a.done() for a in attacks) or not calls:
            sent = time.monotonic()
            calls.append((sent, innocent()))
        replies = [a.result() for a in attacks]
    return Flood(started, replies, calls, rss_before, vm_status(pid)["VmHWM"])
