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
import collections
import contextlib
import functools
import marshal
import os
import select
import signal
import socket
import subprocess
import sys
from io import FileIO
from pathlib import Path
from typing import Any

from evsys.sandbox.base import SandboxError
from evsys.sandbox.local.waits import kill_and_wait, read_to_eof, wait_readable

SPAWNER_SCRIPT = Path(__file__).with_name("spawner.py")
MAX_REPLY = 1 << 16
SPAWNER_EXITED = "the sandbox spawner exited; it is restarted on the next start"


class CgroupDirsRefused(SandboxError):
    """The spawner could not make a cgroup directory of the request (it exists, or the kernel refused);
    none of the request's directories exists, so the caller must not remove any (another's may be there)."""


_Child = tuple[int, list[int]]  # pid, [pidfd, stdin writer, stdout, stderr, setup-error reader]


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


class _Spawner:
    """The helper process and the socket to it; restarted if it dies, and per process (never shared with a
    forked copy of the orchestrator).

    Requests are pipelined: each is sent at once and its reply (the spawner answers in order) resolves the
    oldest waiting future, read by one reader on the event loop while any request is out. So the spawner
    starts children back to back instead of waiting, per child, for the orchestrator's loop to read a reply
    and send the next request (on a busy 2-core machine that round trip, not the spawner's ~0.4 ms of work,
    set how many sandboxes started per second). One event loop at a time has requests out; another waits."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.owner = os.getpid()
        # one per request out, in order: its future and how many fds its reply carries
        self.waiting: collections.deque[tuple[asyncio.Future[_Child], int]] = collections.deque()
        self.outbox: collections.deque[tuple[bytes, array.array[int], asyncio.Future[_Child], int]] = (
            collections.deque()
        )
        self.writing = False  # a writer callback waits for the socket to take the rest of the outbox
        self.loop: asyncio.AbstractEventLoop | None = None  # the loop reading replies while requests are out

    def _ensure_started(self) -> socket.socket:
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
        ours.setblocking(False)
        self.sock = ours
        return ours

    async def _own(self, loop: asyncio.AbstractEventLoop) -> socket.socket:
        """The socket, with `loop` reading its replies (waiting while another live loop has requests out)."""
        if self.owner != os.getpid():  # we are a fork: the parent's spawner and socket are not ours to use
            self.proc, self.sock, self.owner, self.loop = None, None, os.getpid(), None
            self.waiting, self.outbox, self.writing = collections.deque(), collections.deque(), False
        # another thread's loop: no asyncio primitive spans two loops, so poll (rare: one loop is usual)
        while self.loop is not None and self.loop is not loop and not self.loop.is_closed():  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        if self.loop is loop and self.sock is not None:
            return self.sock
        # none, or a closed loop's: its requesters are gone (their children are killed, their unsent
        # requests dropped)
        self.loop, self.writing = None, False
        self.outbox.clear()
        sock = self.sock if self.waiting and self.sock is not None else self._ensure_started()
        loop.add_reader(sock.fileno(), self._read_replies)
        self.loop = loop
        return sock

    async def request(self, message: dict[str, Any], pass_fds: tuple[int, ...], n_fds: int = 5) -> _Child:
        """Ask for one child (`message`: see spawner.py); return its pid and the `n_fds` fds of the reply: a
        sandbox's [pidfd, stdin writer, stdout, stderr, setup-error reader], a helper's [pidfd].

        A caller cancelled before its request was sent sends nothing; one cancelled later waits for the
        reply, then kills the child it names and waits for its exit (its setup makes the sandbox's cgroups,
        which the caller removes next)."""
        loop = asyncio.get_running_loop()
        await self._own(loop)
        msg = marshal.dumps(message)
        future: asyncio.Future[_Child] = loop.create_future()
        self.outbox.append((msg, array.array("i", pass_fds), future, n_fds))
        self._send()
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if any(queued is future for _, _, queued, _ in self.outbox):
                future.cancel()  # never sent: there is no child
                raise
            while not future.done():  # sent: its child is killed, and gone, before the caller cleans up
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(future)
            if not future.cancelled() and future.exception() is None:
                _, fds = future.result()
                for fd in fds[1:]:
                    os.close(fd)
                await kill_and_wait(fds[0])
            raise

    def _send(self) -> None:
        """Send the queued requests in order, as far as the socket takes them (the rest when it is
        writable again: the spawner reads its requests one by one)."""
        sock, loop = self.sock, self.loop
        assert sock is not None and loop is not None
        while self.outbox:
            msg, fds, future, n_fds = self.outbox[0]
            if future.done():  # cancelled before it was sent
                self.outbox.popleft()
                continue
            try:
                sock.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            except BlockingIOError:
                if not self.writing:
                    loop.add_writer(sock.fileno(), self._send)
                    self.writing = True
                return
            except ConnectionError:
                future.set_exception(SandboxError(SPAWNER_EXITED))
            except OSError as exc:
                future.set_exception(SandboxError(f"the sandbox spawner failed: {exc}"))
            else:
                self.waiting.append((future, n_fds))
            self.outbox.popleft()
        if self.writing:
            loop.remove_writer(sock.fileno())
            self.writing = False

    def _read_replies(self) -> None:
        """Every reply that has arrived, each for the oldest waiting request."""
        sock = self.sock
        assert sock is not None
        while self.waiting:
            try:
                data, fds, _, _ = socket.recv_fds(sock, MAX_REPLY, 8)
            except BlockingIOError:
                return
            except ConnectionError:  # it died with requests unread
                data, fds = b"", []
            except OSError as exc:
                self._fail_all(f"the sandbox spawner failed: {exc}")
                return
            if not data:
                self._fail_all(SPAWNER_EXITED)
                return
            future, n_fds = self.waiting.popleft()
            _deliver(future, marshal.loads(data), fds, n_fds)
        if not self.outbox:
            self._stop_reading()

    def _fail_all(self, why: str) -> None:
        for future in (*(future for future, _ in self.waiting), *(future for _, _, future, _ in self.outbox)):
            if not future.done():
                future.set_exception(SandboxError(why))
        self.waiting.clear()
        self.outbox.clear()
        self._stop_reading()  # the next request starts a new spawner if this one is gone

    def _stop_reading(self) -> None:
        if self.loop is not None and self.sock is not None and not self.loop.is_closed():
            self.loop.remove_reader(self.sock.fileno())
            if self.writing:
                self.loop.remove_writer(self.sock.fileno())
        self.loop, self.writing = None, False


def _deliver(future: asyncio.Future[_Child], reply: dict[str, Any], fds: list[int], n_fds: int) -> None:
    """Resolve a request's future with its child; kill and forget a child nobody waits for any more."""
    if "error" in reply or len(fds) != n_fds:
        for fd in fds:
            os.close(fd)
        if not future.done():
            why = reply.get("error", reply)
            if reply.get("dirs_refused"):
                future.set_exception(CgroupDirsRefused(str(why)))
            else:
                future.set_exception(SandboxError(f"the sandbox spawner could not fork: {why}"))
        return
    if future.done() or future.get_loop().is_closed():  # its requester was cancelled
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fds[0], signal.SIGKILL)
        for fd in fds:
            os.close(fd)
        return
    future.set_result((reply["pid"], fds))


_SPAWNER = _Spawner()


async def spawn(
    argv: list[str], *, setup: dict[str, Any], pass_fds: tuple[int, ...], limit: int
) -> SpawnedProcess:
    """Start `argv` through the spawner after it ran `mounts.ChildSetup(**setup)` in the child.

    An argv item "@fd<i>" names the i-th fd of `pass_fds` as numbered in the child. Raises SandboxError
    with the child's own message when its setup or exec failed; on any failure or cancellation the child
    is killed and every fd closed.
    """
    message = {"argv": argv, "setup": setup}
    pid, (pidfd, stdin_w, out_r, err_r, report_r) = await _SPAWNER.request(message, pass_fds)
    # file objects from here on: closing one twice (here and by a transport) is harmless
    pipes = [os.fdopen(stdin_w, "wb", buffering=0), os.fdopen(out_r, "rb", buffering=0)]
    pipes.append(os.fdopen(err_r, "rb", buffering=0))
    try:
        try:
            detail = (await read_to_eof(report_r)).decode("utf-8", "replace").strip()
        finally:
            os.close(report_r)
        if detail:
            raise SandboxError(f"cannot set up the sandbox: {detail}")
        return await _attach(pid, pidfd, pipes, limit)
    except BaseException:
        for pipe in pipes:
            pipe.close()
        await kill_and_wait(pidfd)
        raise


async def start_helper(argv: list[str], fds: dict[int, int]) -> int:
    """Start one of evsys's host helpers (`argv`; the reset helper) through the spawner, with each fd of
    `fds` (its number in the helper -> the fd here) in place and an empty environment; its pidfd (the spawner
    reaps it: the helper reports its outcome itself). Starting it here, with posix_spawn, blocked the event
    loop for ~1 ms per helper on a busy machine; the spawner does it on another core."""
    message = {"helper": argv, "at": list(fds)}
    _, (pidfd,) = await _SPAWNER.request(message, tuple(fds.values()), n_fds=1)
    return pidfd


async def _attach(pid: int, pidfd: int, pipes: list[FileIO], limit: int) -> SpawnedProcess:
    """The child's pipes as asyncio streams. Never left half-done: a cancellation waits until every pipe has
    its transport, then closes them through their transports and re-raises. (Closing a pipe under a live
    transport, or a transport before the loop ran the callbacks its creation queued, leaves the loop watching
    that fd number: the next pipe to get the number, another sandbox's stdout, is then never read, and that
    sandbox's start times out.)"""
    attaching = asyncio.ensure_future(_connect(pipes, limit))
    try:
        transports = await asyncio.shield(attaching)
    except asyncio.CancelledError:
        while not attaching.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(attaching)
        if not attaching.cancelled() and attaching.exception() is None:
            for transport, _ in attaching.result():
                transport.close()
            await asyncio.sleep(0)  # their connection_lost (which closes the pipes) runs before the caller's
        raise
    (_, out_reader), (_, err_reader), (stdin, protocol) = transports
    loop = asyncio.get_running_loop()
    writer = asyncio.StreamWriter(stdin, protocol, None, loop)
    return SpawnedProcess(pid, pidfd, writer, out_reader, err_reader)


async def _connect(pipes: list[FileIO], limit: int) -> list[tuple[Any, Any]]:
    """Transports for stdout and stderr (with their StreamReaders) and stdin (with its protocol), in that
    order; on failure the ones made are closed."""
    loop = asyncio.get_running_loop()
    stdin, stdout, stderr = pipes
    made: list[tuple[Any, Any]] = []
    try:
        for pipe in (stdout, stderr):
            reader = asyncio.StreamReader(limit=limit, loop=loop)
            protocol = functools.partial(asyncio.StreamReaderProtocol, reader, loop=loop)
            reading, _ = await loop.connect_read_pipe(protocol, pipe)
            made.append((reading, reader))
        writing, write_protocol = await loop.connect_write_pipe(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), loop=loop), stdin
        )
        made.append((writing, write_protocol))
    except BaseException:
        for transport, _ in made:
            transport.close()
        raise
    return made
