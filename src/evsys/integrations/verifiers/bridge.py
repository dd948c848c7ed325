"""Host loopback services (verifiers' interception server, its tool servers) reachable from inside a sandbox.

A sandbox has its own network namespace: the host's 127.0.0.1 is out of its reach, whatever its network mode.
verifiers points a harness at `http://127.0.0.1:<port>` on the host; `LoopbackBridge.expose(port)` makes the
same URL work inside the sandbox: a unix socket in a host directory (bound into the sandbox at `MOUNT`)
whose connections the host relays to 127.0.0.1:<port>, and evsys's stdlib forwarder
(`evsys.model.proxy.forwarder`) listening on 127.0.0.1:<port> in the sandbox's namespace, relaying to that
socket. Only the ports exposed this way are reachable; the rest of the host's loopback stays closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from evsys.model.proxy import forwarder as forwarder_module
from evsys.model.proxy.forwarder import close_writer, pump
from evsys.records import Bind
from evsys.sandbox.base import Sandbox, SandboxError, StreamingProcess

MOUNT = "/run/evsys-bridge"
FORWARDER = f"{MOUNT}/forwarder.py"
SOCKETS = f"{MOUNT}/sockets"
PYTHON = "/usr/bin/python3"
START_TIMEOUT = 15.0


class LoopbackBridge:
    """Relays chosen host loopback ports into one sandbox (see the module docstring)."""

    def __init__(self) -> None:
        self.host_dir = Path(tempfile.mkdtemp(prefix="evsys-bridge-"))
        os.chmod(self.host_dir, 0o755)
        self._servers: dict[int, asyncio.Server] = {}
        self._forwarders: dict[int, StreamingProcess] = {}
        self._lock = asyncio.Lock()

    def binds(self) -> list[Bind]:
        """What the sandbox must be started with: the socket directory and the forwarder script."""
        return [
            Bind(src=self.host_dir, dst=SOCKETS),
            Bind(src=Path(forwarder_module.__file__), dst=FORWARDER),
        ]

    async def expose(self, sandbox: Sandbox, port: int) -> None:
        """Make host 127.0.0.1:`port` answer at 127.0.0.1:`port` inside `sandbox` (idempotent)."""
        async with self._lock:
            if port in self._forwarders:
                return
            path = self.host_dir / f"{port}.sock"
            if port not in self._servers:
                self._servers[port] = await asyncio.start_unix_server(_relay_to(port), path=str(path))
                os.chmod(path, 0o666)  # the sandbox's agent user connects too
            argv = [
                PYTHON,
                "-I",
                FORWARDER,
                "--listen",
                f"127.0.0.1:{port}",
                "--uds",
                f"{SOCKETS}/{path.name}",
            ]
            process = await sandbox.spawn(argv, cwd="/", user="root")
            try:
                line = await asyncio.wait_for(process.stdout.readline(), START_TIMEOUT)
            except TimeoutError:
                line = b""
            if not line.startswith(b"listening "):
                await process.kill()
                err = (await process.stderr.read()).decode("utf-8", "replace").strip()[-500:]
                raise SandboxError(
                    f"the loopback forwarder for port {port} did not start: {err or 'no output'}"
                )
            self._forwarders[port] = process

    async def close(self) -> None:
        """Stop the forwarders and host relays, remove the socket directory (idempotent)."""
        for process in self._forwarders.values():
            with contextlib.suppress(Exception):
                await process.kill()
        self._forwarders.clear()
        for server in self._servers.values():
            server.close()
        self._servers.clear()
        self.remove()

    def remove(self) -> None:
        """Remove the socket directory (synchronous; for interpreter shutdown)."""
        shutil.rmtree(self.host_dir, ignore_errors=True)


def _relay_to(port: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """A unix-socket connection handler that relays to host 127.0.0.1:`port`."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port, family=socket.AF_INET)
        except OSError:
            await close_writer(writer)
            return
        try:
            await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        finally:
            await close_writer(up_writer)
            await close_writer(writer)

    return handle
