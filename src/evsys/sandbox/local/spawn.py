"""Starting bubblewrap without forking the orchestrator and without stalling the event loop.

`asyncio.create_subprocess_exec` with a preexec step forks the whole orchestrator (milliseconds of CPU and
copy-on-write faults per sandbox) and waits for the child's setup on the event-loop thread; with several
trials starting at once that serialises them. Instead, one small helper process (spawner.py, started lazily
and kept for the life of this process) forks bwrap children on request and hands back a pidfd and the pipe
ends over a unix socket (SCM_RIGHTS). Everything here is non-blocking: the loop only sends a message and
reacts to readiness of the socket, the setup-error pipe and the child's pidfd.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import functools
import marshal
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import weakref
from pathlib import Path

from evsys.sandbox.base import SandboxError

SPAWNER_SCRIPT = Path(__file__).with_name("spawner.py")
MAX_REPLY = 1 << 16
_Child = tuple[int, list[int]]  # pid, [pidfd, stdin writer, stdout, stderr, setup-error reader]


class SetupError(SandboxError):
    """The child's setup step (`evsysd --setup`) failed; `detail` is its own message."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"cannot set up the sandbox: {detail}")
        self.detail = detail


class SpawnedProcess:
    """A bwrap child started through the spawner: its pipes as asyncio streams, plus kill and async wait."""

    def __init__(
        self,
        pid: int,
        pidfd: int,
        stdin: asyncio.StreamWriter,
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
    ) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self._pidfd = pidfd
        self._exited = False

    @property
    def returncode(self) -> int | None:
        """None while the child runs; -1 once it has exited (its status belongs to the spawner)."""
        if not self._exited and self._pidfd >= 0:
            poller = select.poll()
            poller.register(self._pidfd, select.POLLIN)
            self._exited = bool(poller.poll(0))
        return -1 if self._exited else None

    def kill(self) -> None:
        """SIGKILL the child (no-op once it has exited)."""
        if self._pidfd >= 0 and not self._exited:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    async def wait(self) -> int:
        """Wait until the child has exited (pidfd readiness, never blocking the loop); release the pidfd."""
        if self._pidfd >= 0:
            await wait_readable(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        self._exited = True
        return -1


async def wait_readable(fd: int) -> None:
    """Wait (on the event loop, never blocking it) until `fd` is readable."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def wait_child(pid: int, pidfd: int, kill_after: float) -> int | None:
    """Wait for a child this process started (posix_spawn) to exit, through its pidfd, never blocking the
    loop; reap it and return its exit code, or None when it ran past `kill_after` s and was SIGKILLed. A
    cancelled caller SIGKILLs it too (reaped by a thread): no helper is left behind. Closes `pidfd`."""
    try:
        try:
            await asyncio.wait_for(wait_readable(pidfd), kill_after)
            timed_out = False
        except TimeoutError:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            await wait_readable(pidfd)
            timed_out = True
        except BaseException:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            threading.Thread(target=os.waitpid, args=(pid, 0), daemon=True).start()
            raise
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)  # noqa: ASYNC222 - the pidfd said it has exited
    return None if timed_out else os.waitstatus_to_exitcode(status)


async def _read_to_eof(fd: int) -> bytes:
    """Everything written to a pipe until its last writer closes it (here: the child's exec or exit)."""
    os.set_blocking(fd, False)
    data = bytearray()
    while True:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            await wait_readable(fd)
            continue
        if not chunk:
            return bytes(data)
        data += chunk


class _Spawner:
    """The helper process and the socket to it; restarted if it dies, and per process (never shared with a
    forked copy of the orchestrator)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.owner = os.getpid()
        self.locks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _ensure_started(self) -> socket.socket:
        if self.owner != os.getpid():  # we are a fork: the parent's spawner and socket are not ours to use
            self.proc, self.sock, self.owner = None, None, os.getpid()
            self.locks = weakref.WeakKeyDictionary()
        if self.proc is not None and self.proc.poll() is None and self.sock is not None:
            return self.sock
        if self.sock is not None:
            self.sock.close()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable or "/usr/bin/python3", "-I", "-S", str(SPAWNER_SCRIPT), str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        self.sock = ours
        return ours

    def _lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self.locks.get(loop)
        if lock is None:
            lock = self.locks[loop] = asyncio.Lock()
        return lock

    async def request(self, argv: list[str], setup: dict, pass_fds: tuple[int, ...]) -> _Child:
        """Ask for one child; return its pid and [pidfd, stdin writer, stdout, stderr, setup-error reader].

        The exchange runs to completion even if the caller is cancelled (otherwise the next request would
        read this reply); a child nobody is waiting for any more is killed and its fds closed."""
        async with self._lock():
            exchange = asyncio.ensure_future(self._exchange(argv, setup, pass_fds))
            try:
                return await asyncio.shield(exchange)
            except asyncio.CancelledError:
                exchange.add_done_callback(_discard_child)
                with contextlib.suppress(BaseException):
                    await exchange  # keeps the lock until the reply is consumed
                raise

    async def _exchange(
        self, argv: list[str], setup: dict, pass_fds: tuple[int, ...]
    ) -> tuple[int, list[int]]:
        sock = self._ensure_started()
        msg = marshal.dumps({"argv": argv, "setup": setup})
        try:
            sock.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", pass_fds))])
            await wait_readable(sock.fileno())
            data, fds, _, _ = socket.recv_fds(sock, MAX_REPLY, 8)
        except OSError as exc:
            raise SandboxError(f"the sandbox spawner failed: {exc}") from exc
        if not data:
            raise SandboxError("the sandbox spawner exited; it is restarted on the next start")
        reply = marshal.loads(data)
        if "error" in reply or len(fds) != 5:
            for fd in fds:
                os.close(fd)
            raise SandboxError(f"the sandbox spawner could not fork: {reply.get('error', reply)}")
        return reply["pid"], fds


def _discard_child(exchange: asyncio.Future) -> None:
    """Kill and forget a child whose requester was cancelled."""
    if exchange.cancelled() or exchange.exception() is not None:
        return
    _, fds = exchange.result()
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(fds[0], signal.SIGKILL)
    for fd in fds:
        os.close(fd)


_SPAWNER = _Spawner()


async def spawn(argv: list[str], *, setup: dict, pass_fds: tuple[int, ...], limit: int) -> SpawnedProcess:
    """Start `argv` through the spawner after it ran `mounts.ChildSetup(**setup)` in the child.

    An argv item "@fd<i>" names the i-th fd of `pass_fds` as numbered in the child. Raises SandboxError
    with the child's own message when its setup or exec failed; on any failure or cancellation the child
    is killed and every fd closed.
    """
    pid, (pidfd, stdin_w, out_r, err_r, report_r) = await _SPAWNER.request(argv, setup, pass_fds)
    # file objects from here on: closing one twice (here and by a transport) is harmless
    pipes = [os.fdopen(stdin_w, "wb", buffering=0), os.fdopen(out_r, "rb", buffering=0)]
    pipes.append(os.fdopen(err_r, "rb", buffering=0))
    try:
        try:
            detail = (await _read_to_eof(report_r)).decode("utf-8", "replace").strip()
        finally:
            os.close(report_r)
        if detail:
            raise SetupError(detail)
        return await _attach(pid, pidfd, pipes, limit)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        os.close(pidfd)
        for pipe in pipes:
            pipe.close()
        raise


async def _attach(pid: int, pidfd: int, pipes: list, limit: int) -> SpawnedProcess:
    loop = asyncio.get_running_loop()
    stdin, stdout, stderr = pipes
    readers = []
    for pipe in (stdout, stderr):
        reader = asyncio.StreamReader(limit=limit, loop=loop)
        await loop.connect_read_pipe(functools.partial(asyncio.StreamReaderProtocol, reader, loop=loop), pipe)
        readers.append(reader)
    transport, protocol = await loop.connect_write_pipe(
        lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), loop=loop), stdin
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return SpawnedProcess(pid, pidfd, writer, readers[0], readers[1])
