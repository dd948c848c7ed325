"""`SandboxProcess`: a long-lived process inside a sandbox with streaming stdin, stdout and stderr.

Returned by `LocalSandbox.spawn`. Its `stdout`/`stderr` are `asyncio.StreamReader`s fed as the daemon reads
the pipes, with asyncio's own flow control: once a reader holds more than twice `STREAM_LIMIT` unread bytes
the daemon stops reading that pipe (the process blocks writing, as with any full pipe) until it drains below
the limit; so a chatty process nobody reads never piles up in the orchestrator. Read both streams, or the
process may block; `stdin` takes writes like an `asyncio.StreamWriter` (`write`, `drain`, `close`). `kill()`
SIGKILLs the process's whole tree (process group, session and descendants) and waits for it to end; stopping
the sandbox kills everything regardless."""

from __future__ import annotations

import asyncio
import contextlib
import signal

from evsys.sandbox.base import SandboxError
from evsys.sandbox.local.client import DaemonClient, Header, Reply

STREAM_LIMIT = 16 * 1024 * 1024  # longest line readline() accepts (harness JSON events can be large)


class SandboxStdin:
    """The write end of a spawned process's stdin (the subset of `asyncio.StreamWriter` harnesses use)."""

    def __init__(self, client: DaemonClient, rid: int) -> None:
        self._client = client
        self._rid = rid
        self._closed = False

    def write(self, data: bytes) -> None:
        """Queue `data` for the process's stdin (in order)."""
        if self._closed:
            raise RuntimeError("stdin of the sandbox process is closed")
        if data:
            self._send({"op": "write", "target": self._rid}, bytes(data))

    def _send(self, header: Header, payload: bytes = b"") -> None:
        try:
            self._client.write_frame(header, payload)
        except SandboxError as exc:
            raise ConnectionResetError(f"the sandbox is gone: {exc}") from exc

    async def drain(self) -> None:
        """Wait until the daemon's pipe to the sandbox has room again."""
        try:
            await self._client.writer.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise ConnectionResetError(f"the sandbox is gone: {exc}") from exc

    def close(self) -> None:
        """Close stdin once everything written so far has been delivered (idempotent)."""
        if not self._closed:
            self._closed = True
            with contextlib.suppress(ConnectionError, RuntimeError):
                self._send({"op": "eof", "target": self._rid})

    def is_closing(self) -> bool:
        """Whether `close()` was called."""
        return self._closed

    async def wait_closed(self) -> None:
        """Nothing to wait for: closing is a message to the daemon."""


class _PipeFlow:
    """The transport a StreamReader pauses and resumes: asks the daemon to stop or restart reading a pipe."""

    def __init__(self, client: DaemonClient, rid: int, fd: int) -> None:
        self._client = client
        self._rid = rid
        self._fd = fd

    def pause_reading(self) -> None:
        """The reader's buffer is full: the daemon leaves the pipe unread."""
        self._send("pause")

    def resume_reading(self) -> None:
        """The reader drained: the daemon reads the pipe again."""
        self._send("resume")

    def _send(self, op: str) -> None:
        with contextlib.suppress(SandboxError):  # the sandbox is gone: nothing more will arrive
            self._client.write_frame({"op": op, "target": self._rid, "fd": self._fd})


class SandboxProcess:
    """A process spawned in a sandbox; see the module docstring."""

    def __init__(self, client: DaemonClient, argv: list[str]) -> None:
        self.argv = list(argv)
        self.pid: int | None = None  # inside the sandbox's pid namespace
        self.stdout = asyncio.StreamReader(limit=STREAM_LIMIT)
        self.stderr = asyncio.StreamReader(limit=STREAM_LIMIT)
        self.stdin: SandboxStdin
        self.timed_out = False
        self._client = client
        self._rid = 0
        self._future: asyncio.Future[Reply] | None = None
        self._returncode: int | None = None
        self._started = asyncio.Event()

    async def _start(self, request: Header, payload: bytes) -> None:
        self._rid, self._future = await self._client.start_request(request, payload, self._on_frame)
        self.stdin = SandboxStdin(self._client, self._rid)
        # StreamReader only calls pause_reading/resume_reading on its transport; _PipeFlow has just those.
        for reader, fd in ((self.stdout, 1), (self.stderr, 2)):
            reader.set_transport(_PipeFlow(self._client, self._rid, fd))  # type: ignore[arg-type]  # see above
        self._future.add_done_callback(self._on_exit)
        await self._started.wait()
        failure = self._future.exception() if self._future.done() else None
        if failure is not None:
            raise failure

    def _on_frame(self, header: Header, payload: bytes) -> None:
        op = header.get("op")
        if op == "started":
            self.pid = header.get("pid")
            self._started.set()
        elif op == "out" and payload:
            (self.stdout if header.get("fd") == 1 else self.stderr).feed_data(payload)

    def _on_exit(self, future: asyncio.Future[Reply]) -> None:
        if future.cancelled() or future.exception() is not None:
            self._returncode = -signal.SIGKILL  # the sandbox went away under the process
        else:
            header = future.result().header
            self._returncode = int(header["code"])
            self.timed_out = bool(header.get("timed_out"))
        self.stdout.feed_eof()
        self.stderr.feed_eof()
        self._started.set()

    @property
    def returncode(self) -> int | None:
        """The exit code (128+n when killed by signal n), or None while running."""
        return self._returncode

    async def wait(self) -> int:
        """Wait for the process to exit; return its exit code."""
        assert self._future is not None
        with contextlib.suppress(SandboxError):
            await asyncio.shield(self._future)
        if self._returncode is None:  # awaiting a done future does not yield: its callback may not have run
            self._on_exit(self._future)
        assert self._returncode is not None
        return self._returncode

    async def send_signal(self, sig: int) -> None:
        """Send `sig` to the process's group (no-op once it has exited)."""
        if self._returncode is None:
            with contextlib.suppress(SandboxError):
                await self._client.send({"op": "signal", "target": self._rid, "sig": int(sig)})

    async def kill(self) -> None:
        """SIGKILL the process and everything it started, then wait for it (idempotent)."""
        if self._returncode is None:
            with contextlib.suppress(SandboxError):
                await self._client.send({"op": "signal", "target": self._rid, "tree": True})
        await self.wait()
