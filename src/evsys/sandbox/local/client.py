"""Host side of the exec-daemon protocol: frame encoding, and one reader task routing replies to futures."""

from __future__ import annotations

import asyncio
import marshal
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evsys.sandbox.base import SandboxError

Header = dict[str, Any]
"""A frame's header: a dict of plain values (marshal-encoded), `op` saying what it is."""

HEADER = struct.Struct("!QQ")  # header length, payload length: 64 bits each, so no length ever wraps
MAX_HEADER = 16 << 20  # a reply header is a small dict; anything larger means the stream is broken
MAX_PAYLOAD = 16 << 30  # no reply carries more (a /logs copy is bounded far below by CopyOutLimits)
CONTROL_TIMEOUT = 60.0  # seconds for requests the daemon answers at once: kill, ping
FILE_TIMEOUT = 600.0  # seconds for file requests (files, pack, read), which may move a lot of data
EXEC_GRACE = 60.0  # seconds past a command's own timeout before its request counts as wedged
WATCH_INTERVAL = 1.0  # seconds between checks of the requests' deadlines (only while some have one)


class FrameError(SandboxError):
    """A frame whose lengths no well-behaved peer sends (the stream can no longer be trusted)."""


def frame_prefix(header_len: int, payload_len: int) -> bytes:
    """The 16 bytes that start a frame: both lengths as unsigned 64-bit big-endian numbers."""
    return HEADER.pack(header_len, payload_len)


def parse_prefix(
    prefix: bytes, *, max_header: int = MAX_HEADER, max_payload: int = MAX_PAYLOAD
) -> tuple[int, int]:
    """(header length, payload length) of a frame; FrameError when either is over its limit."""
    header_len, payload_len = HEADER.unpack(prefix)
    if header_len > max_header or payload_len > max_payload:
        raise FrameError(
            f"the daemon sent a frame of {header_len} + {payload_len} bytes, over the limit of "
            f"{max_header} + {max_payload}: the connection is no longer usable"
        )
    return header_len, payload_len


def encode_frame(header: Header, payload: bytes = b"") -> bytes:
    """One protocol frame: lengths, a marshal-encoded header dict (plain values only), raw payload."""
    h = marshal.dumps(header)
    return frame_prefix(len(h), len(payload)) + h + payload


def request_timeout(header: Header) -> float | None:
    """How long the host waits for a request's final reply before it gives the sandbox up as wedged."""
    op = header.get("op")
    if op in ("kill", "ping"):
        return CONTROL_TIMEOUT
    if op in ("files", "pack", "read"):
        return FILE_TIMEOUT
    if op == "exec" and header.get("timeout"):
        return float(header["timeout"]) + EXEC_GRACE
    return None  # an exec without a timeout: the caller's own deadline (a trial's timeouts) applies


@dataclass
class Reply:
    """A finished request: the final header plus everything streamed for it."""

    header: Header
    stdout: bytes = b""
    stderr: bytes = b""


FrameHandler = Callable[[Header, bytes], None]
WedgedHandler = Callable[[str], None]
STREAM_ENDS = ("exit", "error", "packed")  # the final reply of a streaming request


@dataclass
class _Pending:
    future: asyncio.Future[Reply]
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)
    on_frame: FrameHandler | None = None  # streaming requests: every frame goes here as it arrives
    deadline: float | None = None  # time.monotonic() by which the final reply must have come
    what: str = ""


class DaemonClient:
    """Talks to one sandbox's daemon over its stdin/stdout pipes; many requests may be in flight at once."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        name: str,
        stderr: asyncio.StreamReader | None = None,
        on_wedged: WedgedHandler | None = None,
    ) -> None:
        self.reader = reader
        self.on_wedged = on_wedged  # called (with the reason) when a request times out: kill the sandbox
        self.stderr = stderr
        self.writer = writer
        self.name = name
        self.daemon_pid: int | None = None
        self.ready: Header = {}
        self._next_id = 0
        self._pending: dict[int, _Pending] = {}
        self._task: asyncio.Task[None] | None = None
        self._closed_reason: str | None = None
        self._watchdog: asyncio.TimerHandle | None = None

    @property
    def closed(self) -> str | None:
        """Why the connection to the daemon is closed, or None while it is open."""
        return self._closed_reason

    async def wait_ready(self) -> None:
        """Read the daemon's `ready` frame, then start the demultiplexing reader task."""
        header, _ = await self._read_frame()
        if header.get("op") != "ready":
            raise SandboxError(f"sandbox {self.name}: unexpected first message from the daemon: {header}")
        self.daemon_pid = header.get("pid")
        self.ready = header  # with what the daemon passes on to its commands (native/inherited.c)
        self._task = asyncio.get_running_loop().create_task(
            self._read_loop(), name=f"evsys-sandbox-{self.name}"
        )

    async def _read_frame(self) -> tuple[Header, bytes]:
        hlen, plen = parse_prefix(await self.reader.readexactly(HEADER.size))
        body = await self.reader.readexactly(hlen + plen)
        header = marshal.loads(body[:hlen])
        if not isinstance(header, dict):
            raise SandboxError(f"sandbox {self.name}: malformed message from the daemon")
        return header, body[hlen:]

    async def _read_loop(self) -> None:
        try:
            while True:
                header, payload = await self._read_frame()
                self._dispatch(header, payload)
        except FrameError as exc:
            self._give_up(str(exc))
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            detail = type(exc).__name__
            if self.stderr is not None:
                try:
                    text = await asyncio.wait_for(self.stderr.read(4096), 0.5)
                    detail = text.decode("utf-8", "replace").strip()[-1000:] or detail
                except (TimeoutError, ConnectionError):
                    pass
            self._fail_all(f"the sandbox daemon exited ({detail})")
        except asyncio.CancelledError:
            self._fail_all("the sandbox was stopped")
            raise

    def _dispatch(self, header: Header, payload: bytes) -> None:
        rid = header.get("id")
        pending = self._pending.get(rid) if isinstance(rid, int) else None
        if pending is None:
            return
        op = header.get("op")
        if pending.on_frame is not None and op not in STREAM_ENDS:
            pending.on_frame(header, payload)
            return
        if op == "out":
            (pending.out if header.get("fd") == 1 else pending.err).extend(payload)
            return
        del self._pending[header["id"]]
        if pending.future.done():
            return
        if op == "error":
            pending.future.set_exception(SandboxError(f"sandbox {self.name}: {header.get('message')}"))
            return
        n = header.get("out", 0)
        if pending.on_frame is not None:
            pending.on_frame({"op": "out", "fd": 1}, payload[:n])
            pending.on_frame({"op": "out", "fd": 2}, payload[n:])
        pending.out += payload[:n]
        pending.err += payload[n:]
        pending.future.set_result(Reply(header, bytes(pending.out), bytes(pending.err)))

    def _fail_all(self, reason: str) -> None:
        self._closed_reason = reason
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        for pending in self._pending.values():
            if not pending.future.done():
                pending.future.set_exception(SandboxError(f"sandbox {self.name}: {reason}"))
        self._pending.clear()

    async def request(
        self,
        header: Header,
        payload: bytes = b"",
        *,
        timeout: float | None = -1.0,  # noqa: ASYNC109 - a deadline for the daemon's answer, by op
        on_frame: FrameHandler | None = None,
    ) -> Reply:
        """Send one request and wait for its final reply, at most `timeout` seconds (default: by op, see
        `request_timeout`; None: no limit). A request that times out means a wedged daemon: the sandbox is
        given up (`on_wedged`) and SandboxError raised."""
        if timeout is not None and timeout < 0:
            timeout = request_timeout(header)
        rid, future = await self.start_request(header, payload, on_frame)
        pending = self._pending.get(rid)
        if timeout is not None and pending is not None:
            pending.deadline = time.monotonic() + timeout
            pending.what = f"a {header.get('op')!r} request within {timeout:g} s"
            if self._watchdog is None:
                self._watchdog = asyncio.get_running_loop().call_later(WATCH_INTERVAL, self._watch)
        return await future

    def _watch(self) -> None:
        """Fail requests past their deadline (once a second while any has one): a wedged daemon."""
        self._watchdog = None
        now, armed = time.monotonic(), False
        for rid, pending in list(self._pending.items()):
            if pending.deadline is None:
                continue
            if now < pending.deadline:
                armed = True
                continue
            del self._pending[rid]
            reason = f"the daemon did not answer {pending.what}"
            if not pending.future.done():
                pending.future.set_exception(
                    SandboxError(f"sandbox {self.name}: {reason}; the sandbox was killed")
                )
            self._give_up(reason)
            return
        if armed:
            self._watchdog = asyncio.get_running_loop().call_later(WATCH_INTERVAL, self._watch)

    def _give_up(self, reason: str) -> None:
        """The daemon can no longer be trusted to answer: fail every request and let the owner kill it."""
        self._fail_all(reason)
        if self.on_wedged is not None:
            self.on_wedged(reason)

    async def start_request(
        self, header: Header, payload: bytes = b"", on_frame: FrameHandler | None = None
    ) -> tuple[int, asyncio.Future[Reply]]:
        """Send one request; return its id and the future of its final reply. `on_frame` (streaming) gets
        every intermediate frame and the final output as it arrives."""
        if self._closed_reason is not None:
            raise SandboxError(f"sandbox {self.name}: {self._closed_reason}")
        self._next_id += 1
        rid = self._next_id
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._pending[rid] = _Pending(future, on_frame=on_frame)
        header["id"] = rid
        try:
            await self.send(header, payload)
        except SandboxError:
            self._pending.pop(rid, None)
            raise
        return rid, future

    async def send(self, header: Header, payload: bytes = b"") -> None:
        """Send a frame that expects no reply of its own (stdin for a spawned process, a signal)."""
        self.write_frame(header, payload)
        if len(payload) > 1 << 16:
            try:
                await self.writer.drain()
            except (ConnectionError, RuntimeError) as exc:
                raise SandboxError(f"sandbox {self.name}: cannot reach the daemon: {exc}") from exc

    def write_frame(self, header: Header, payload: bytes = b"") -> None:
        """Queue one frame for the daemon without waiting (SandboxError once the daemon is gone)."""
        if self._closed_reason is not None:
            raise SandboxError(f"sandbox {self.name}: {self._closed_reason}")
        try:
            self.writer.write(encode_frame(header, payload))
        except (ConnectionError, RuntimeError) as exc:
            raise SandboxError(f"sandbox {self.name}: cannot reach the daemon: {exc}") from exc

    async def close(self) -> None:
        """Stop the reader task and fail whatever is still waiting."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        self._fail_all("the sandbox was stopped")
        self.writer.close()
