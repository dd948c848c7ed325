"""`GuardedServer`: uvicorn's HTTP/1.1 protocol behind evsys's own accept loop, for the servers a sandbox can
reach (the recording model proxy and its per-session sockets).

uvicorn's own server accepts every connection the kernel queues and times out only idle keep-alive
connections, so a client that opens thousands of connections and never finishes a request holds a descriptor
each for ever. Here:

- at most `max_connections` connections per listening socket are open; the next ones wait in the kernel's
  listen queue (costing the server nothing) until one closes;
- a connection must complete its request headers within `header_timeout_sec` of its first byte (or of being
  accepted), headers are capped at `max_header_bytes`, and an idle keep-alive connection is closed after
  `keep_alive_sec`;
- a connection accepted into the descriptor reserve (evsys.util.descriptors) is closed at once, so however
  many connections arrive, result files can still be written;
- accept errors (EMFILE, ENFILE, ...) are logged at a bounded rate, one line without a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from evsys.util.descriptors import in_reserve, raise_descriptor_limit
from evsys.util.ratelog import BoundedLog

log = logging.getLogger(__name__)
ACCEPT_RETRY_SEC = 0.1
LISTEN_BACKLOG = 128


@dataclass(frozen=True)
class ConnectionLimits:
    """What one listening socket allows its clients."""

    max_connections: int = 64
    header_timeout_sec: float = 10.0
    keep_alive_sec: float = 5.0
    max_header_bytes: int = 64 * 1024


class GuardedServer:
    """Serve an ASGI app on pre-bound sockets on the running loop, within `ConnectionLimits` per socket."""

    def __init__(
        self, app: Any, sockets: list[socket.socket], limits: ConnectionLimits, *, name: str = "server"
    ) -> None:
        try:
            import uvicorn
            from uvicorn.server import ServerState
        except ImportError as exc:
            raise RuntimeError(f"{name} needs `uvicorn`: pip install 'evsys[harness]'") from exc
        config = uvicorn.Config(
            app,
            lifespan="off",
            log_config=None,
            log_level="warning",
            access_log=False,
            http="h11",
            ws="none",
            timeout_keep_alive=max(1, round(limits.keep_alive_sec)),
            h11_max_incomplete_event_size=limits.max_header_bytes,
            server_header=False,
            date_header=False,
        )
        config.load()
        self.config = config
        self.state = ServerState()
        self.limits = limits
        self.name = name
        self.sockets = sockets
        self._accepting: list[asyncio.Task[None]] = []
        self._errors = BoundedLog(log)

    async def start(self) -> None:
        """Listen on every socket and start accepting."""
        raise_descriptor_limit()
        for sock in self.sockets:
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
            slots = asyncio.Semaphore(self.limits.max_connections)
            self._accepting.append(asyncio.create_task(self._accept(sock, slots)))

    async def stop(self, grace: float = 2.0) -> None:
        """Stop accepting, let requests in flight finish within `grace` seconds, close everything."""
        for task in self._accepting:
            task.cancel()
        await asyncio.gather(*self._accepting, return_exceptions=True)
        self._accepting.clear()
        for sock in self.sockets:
            sock.close()
        for connection in list(self.state.connections):
            connection.shutdown()
        if self.state.tasks:
            await asyncio.wait(set(self.state.tasks), timeout=grace)
        for task in list(self.state.tasks):
            task.cancel()
        for connection in list(self.state.connections):
            connection.transport.abort()

    async def _accept(self, sock: socket.socket, slots: asyncio.Semaphore) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await slots.acquire()
            try:
                conn, _ = await loop.sock_accept(sock)
            except OSError as exc:
                slots.release()
                self._errors.warning(f"accept:{exc.errno}", f"{self.name}: cannot accept a connection: {exc}")
                await asyncio.sleep(ACCEPT_RETRY_SEC)
                continue
            if in_reserve(conn.fileno()):
                conn.close()
                slots.release()
                self._errors.warning("reserve", f"{self.name}: refused a connection: few descriptors left")
                continue
            protocol = _GuardedProtocol(self._protocol(loop), slots.release, self.limits.header_timeout_sec)
            try:
                await loop.connect_accepted_socket(_factory(protocol), conn)
            except OSError as exc:
                conn.close()
                protocol.release()
                self._errors.warning("connect", f"{self.name}: dropped an accepted connection: {exc}")

    def _protocol(self, loop: asyncio.AbstractEventLoop) -> asyncio.Protocol:
        return self.config.http_protocol_class(  # type: ignore[call-arg]
            config=self.config, server_state=self.state, app_state={}, _loop=loop
        )


def _factory(protocol: asyncio.Protocol) -> Callable[[], asyncio.Protocol]:
    return lambda: protocol


class _GuardedProtocol(asyncio.Protocol):
    """uvicorn's h11 protocol with a header deadline; gives its slot back when the connection ends."""

    def __init__(self, inner: Any, release: Any, header_timeout: float) -> None:
        self.inner = inner
        self._release = release
        self._header_timeout = header_timeout
        self._deadline: asyncio.TimerHandle | None = None
        self._transport: asyncio.Transport | None = None

    def release(self) -> None:
        """Give the connection's slot back (once)."""
        release, self._release = self._release, None
        if release is not None:
            release()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # a socket transport: it can abort
        self.inner.connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)
        cycle = self.inner.cycle  # the request uvicorn is serving, once its headers are complete
        if cycle is not None and not cycle.response_complete:
            self._disarm()
        elif self._deadline is None:
            self._arm()  # the first bytes of the next request on a kept-alive connection

    def eof_received(self) -> bool | None:
        keep_open: bool | None = self.inner.eof_received()
        return keep_open

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        try:
            self.inner.connection_lost(exc)
        finally:
            self.release()

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(self._header_timeout, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self._transport is not None:
            self._transport.abort()
