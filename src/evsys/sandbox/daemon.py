"""The evsys exec daemon: runs inside every local sandbox and executes commands the host asks for.

Stdlib only; bound read-only at /.evsys/daemon with daemon_os.py and daemon_workers.py, and started by
bubblewrap as `/usr/bin/python3 -I -S -c "...; import daemon; daemon.main()"`. It talks to the host over its
stdin/stdout (pipes owned by the host) with frames of `struct "!II" (header_len, payload_len)` + a header dict
in `marshal` format (built in, so no import cost at startup; only str/int/float/bool/None/dict values) + raw
payload bytes (see docs/sandbox.md).

Requests:  {"op": "exec", "id", "cmd", "cwd", "env", "user", "timeout", "stdin": bool}
             payload = stdin bytes
           {"op": "kill", "id"}  kill every process in the sandbox except the daemon
           {"op": "ping", "id"}
           spawn / write / eof / signal: long-lived processes with streaming stdio (daemon_spawn.py)
Responses: {"op": "out", "id", "fd": 1|2}  payload = a chunk of output (large outputs stream)
           {"op": "exit", "id", "code", "timed_out", "out": n, "free": bytes}
             payload = the rest of stdout ([:n]) + the rest of stderr
           {"op": "killed", "id", "count"}, {"op": "error", "id", "message"}, {"op": "ready", "pid"},
           {"op": "pong", "id"}
Every command runs in its own session/process group; a timeout SIGKILLs that group (not polled: the select
timeout is the nearest deadline) and output produced before it is kept. The daemon is the pid namespace's init
(bwrap --as-pid-1), so nothing inside can kill it; it reaps every child and orphan on SIGCHLD (a wakeup fd).
"""

from __future__ import annotations

import _signal as signal  # the C module: `signal` would import enum, slowing startup
import heapq
import marshal
import posix as os  # the C module: `os` loads posixpath, stat, _collections_abc (~1.3 ms per start)
import select
import struct
import sys
import time

sys.path.insert(0, __file__.rpartition("/")[0] or ".")
from daemon_os import (
    AGENT_UID,
    drain,
    exec_child,
    free_bytes,
    harden_process,
    kill_all,
)
from daemon_spawn import SpawnMixin
from daemon_workers import Job, Worker, WorkerPoolMixin, prepare_job_dir

HEADER = struct.Struct("!II")
CHUNK = 1 << 16
FLUSH_AT = 1 << 16


class Command:
    """One running command: its process, pipes, buffered output and deadline."""

    __slots__ = (
        "buf",
        "eof",
        "fds",
        "job",
        "pid",
        "req",
        "rid",
        "started",
        "stdin_data",
        "stdin_fd",
        "stream",
        "timed_out",
        "worker",
    )

    def __init__(self, rid: int) -> None:
        self.rid = rid
        self.pid = 0
        self.job: Job | None = None
        self.worker: Worker | None = None
        self.req: dict = {}
        self.started = False
        self.stdin_fd = -1
        self.stdin_data = memoryview(b"")
        self.buf = {1: bytearray(), 2: bytearray()}
        self.timed_out = False
        self.fds: dict[int, int] = {}
        self.stream = False  # spawned: output is sent as soon as it is read; stdin stays open
        self.eof = False


class Daemon(WorkerPoolMixin, SpawnMixin):
    """The event loop: frames in on fd `rfd`, frames out on fd `wfd`, one selector for everything."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self.rfd = rfd
        self.wfd = wfd
        self.poller = select.epoll()
        self.handlers: dict[int, tuple[str, object]] = {}
        self.inbuf = bytearray()
        self.commands: dict[int, Command] = {}
        self.deadlines: list[tuple[float, int]] = []
        self.devnull = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
        self.by_pid: dict[int, Command] = {}
        self.sig_r, sig_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(sig_w, warn_on_full_buffer=False)
        self.idle: dict[str, list[Worker]] = {"agent": [], "root": []}
        self.workers: dict[int, Worker] = {}
        self.used: set[str] = set()  # users who ran a command without stdin since start or the last kill
        prepare_job_dir()

    def watch(self, fd: int, handler: tuple[str, object], events: int = select.EPOLLIN) -> None:
        """Register `fd` with the poller and remember what to do when it is ready."""
        self.poller.register(fd, events)
        self.handlers[fd] = handler

    def unwatch(self, fd: int) -> None:
        """Stop watching `fd` (before closing it)."""
        self.poller.unregister(fd)
        self.handlers.pop(fd, None)

    def send(self, header: dict, payload: bytes = b"") -> None:
        """Write one frame to the host (blocking; the host always reads)."""
        h = marshal.dumps(header)
        data = HEADER.pack(len(h), len(payload)) + h + payload
        view = memoryview(data)
        while view:
            n = os.write(self.wfd, view)
            view = view[n:]

    def run(self) -> None:
        """Serve until the host closes our stdin."""
        self.watch(self.rfd, ("host", None))
        self.watch(self.sig_r, ("sigchld", None))
        self.send({"op": "ready", "pid": os.getpid()})
        while True:
            timeout = None
            if self.deadlines:
                timeout = max(0.0, self.deadlines[0][0] - time.monotonic())
            # snapshot the handlers: an fd closed and reused within this batch must not reach the new owner
            events = [
                (fd, self.handlers.get(fd)) for fd, _ in self.poller.poll(-1 if timeout is None else timeout)
            ]
            for fd, handler in events:
                if handler is None:
                    continue
                kind, cmd = handler
                if kind == "host":
                    if not self.read_host():
                        return
                elif kind == "sigchld":
                    self.reap()
                elif kind == "worker":
                    if cmd.pid in self.workers and fd == cmd.status_fd:
                        self.worker_output(cmd)
                elif cmd.rid not in self.commands or self.commands[cmd.rid] is not cmd:
                    continue  # finished earlier in this batch; its fds are closed (and may be reused)
                elif kind == "pipe" and fd in cmd.fds:
                    self.read_pipe(cmd, fd)
                elif kind == "stdin" and fd == cmd.stdin_fd:
                    self.write_stdin(cmd)

            self.expire()

    def read_host(self) -> bool:
        """Read request bytes; dispatch every complete frame. False when the host went away."""
        data = os.read(self.rfd, CHUNK)
        if not data:
            return False
        self.inbuf += data
        while len(self.inbuf) >= HEADER.size:
            hlen, plen = HEADER.unpack_from(self.inbuf)
            end = HEADER.size + hlen + plen
            if len(self.inbuf) < end:
                break
            header = marshal.loads(self.inbuf[HEADER.size : HEADER.size + hlen])
            if not isinstance(header, dict):
                raise ValueError("request header is not a dict")
            payload = bytes(self.inbuf[HEADER.size + hlen : end])
            del self.inbuf[:end]
            self.dispatch(header, payload)
        return True

    def dispatch(self, req: dict, payload: bytes) -> None:
        """Handle one request."""
        op = req.get("op")
        try:
            if op == "exec":
                self.start(req, payload)
            elif op == "spawn":
                self.spawn(req, payload)
            elif op in ("write", "eof"):
                self.feed(req, payload)
            elif op == "signal":
                self.signal_process(req)
            elif op == "ping":
                self.send({"op": "pong", "id": req["id"]})
            elif op == "kill":
                count = kill_all(exclude={w.pid for w in self.workers.values()})
                for worker in list(self.workers.values()):  # killed too; their commands end as killed
                    self.retire(worker)
                self.used.clear()
                self.send({"op": "killed", "id": req["id"], "count": count})
            else:
                self.send({"op": "error", "id": req.get("id"), "message": f"unknown op {op!r}"})
        except OSError as exc:
            self.send({"op": "error", "id": req.get("id"), "message": f"{op} failed: {exc}"})

    def start(self, req: dict, payload: bytes) -> None:
        """Run on an idle persistent worker when possible; else (stdin, pool full, the user's first command
        since start or the last kill) fork a fresh bash."""
        user = "root" if req.get("user") == "root" else "agent"
        # a user's first command runs forked: a one-off is cheaper that way; a worker pays off from the second
        first = user not in self.used and not self.idle[user]
        if not req.get("stdin"):
            self.used.add(user)
        while not req.get("stdin") and not first:
            worker = self.acquire(user)
            if worker is None:
                break
            cmd = Command(req["id"])
            cmd.req = req
            try:
                cmd.job, cmd.worker = Job(cmd.rid, req, 0 if user == "root" else AGENT_UID), worker
            except OSError:  # e.g. the sandbox's storage is full: a forked bash needs no job files
                self.idle[user].append(worker)
                break
            try:
                worker.submit(cmd)
            except BrokenPipeError:  # the worker died since it was last idle
                cmd.job.cleanup()
                for fd in cmd.job.read_fds:
                    os.close(fd)
                worker.current = None
                self.retire(worker)
                continue
            cmd.fds = {cmd.job.read_fds[0]: 1, cmd.job.read_fds[1]: 2}
            self.track(cmd, req)
            return
        self.start_forked(req, payload)

    def track(self, cmd: Command, req: dict) -> None:
        """Register a started command's output pipes and deadline."""
        self.commands[cmd.rid] = cmd
        for fd in cmd.fds:
            self.watch(fd, ("pipe", cmd))
        if req.get("timeout") is not None:
            heapq.heappush(self.deadlines, (time.monotonic() + float(req["timeout"]), cmd.rid))

    def start_forked(self, req: dict, payload: bytes) -> Command:
        """Fork a fresh `bash -c` for the command with its own pipes."""
        cmd = Command(req["id"])
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(out_r, False)  # only our ends are non-blocking; the command's ends stay blocking
        os.set_blocking(err_r, False)
        in_r = self.devnull
        if req.get("stdin"):
            in_r, cmd.stdin_fd = os.pipe2(os.O_CLOEXEC)
            os.set_blocking(cmd.stdin_fd, False)
            cmd.stdin_data = memoryview(payload)
        pid = os.fork()
        if pid == 0:
            tail = req.get("argv_tail")
            exec_child(req, in_r, out_w, err_w, ["bash", "-c", req["cmd"], *tail] if tail else None)
        os.close(out_w)
        os.close(err_w)
        if in_r != self.devnull:
            os.close(in_r)
        cmd.pid = pid
        cmd.fds = {out_r: 1, err_r: 2}
        self.by_pid[pid] = cmd
        self.track(cmd, req)
        if cmd.stdin_fd >= 0:
            self.watch(cmd.stdin_fd, ("stdin", cmd), select.EPOLLOUT)
        return cmd

    def read_pipe(self, cmd: Command, fd: int) -> None:
        """Buffer output; stream it to the host in chunks once enough has piled up."""
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        stream = cmd.fds[fd]
        if not data:
            self.unwatch(fd)
            os.close(fd)
            cmd.fds.pop(fd)
            return
        buf = cmd.buf[stream]
        buf += data
        if len(buf) >= FLUSH_AT or cmd.stream:
            self.send({"op": "out", "id": cmd.rid, "fd": stream}, bytes(buf))
            buf.clear()

    def write_stdin(self, cmd: Command) -> None:
        """Feed the command's stdin without blocking; close it when everything is written."""
        try:
            n = os.write(cmd.stdin_fd, cmd.stdin_data[:CHUNK]) if cmd.stdin_data else 0
        except BlockingIOError:
            return
        except BrokenPipeError:
            n, cmd.stdin_data = 0, memoryview(b"")
        cmd.stdin_data = cmd.stdin_data[n:]
        if not cmd.stdin_data:
            self.stdin_idle(cmd)

    def close_stdin(self, cmd: Command) -> None:
        """Close the command's stdin pipe if still open."""
        if cmd.stdin_fd >= 0:
            self.unwatch(cmd.stdin_fd)
            os.close(cmd.stdin_fd)
            cmd.stdin_fd = -1

    def finish(self, cmd: Command, code: int) -> None:
        """The command's main process exited: drain what its pipes hold and report."""
        for fd, stream in list(cmd.fds.items()):
            drain(fd, cmd.buf[stream])
            self.unwatch(fd)
            os.close(fd)
        cmd.fds = {}
        if cmd.job is not None:
            cmd.job.cleanup()
        self.close_stdin(cmd)
        del self.commands[cmd.rid]
        out, err = bytes(cmd.buf[1]), bytes(cmd.buf[2])
        header = {"op": "exit", "id": cmd.rid, "code": code, "timed_out": cmd.timed_out, "out": len(out)}
        header["free"] = free_bytes("/")
        self.send(header, out + err)

    def reap(self) -> None:
        """Collect every exited child (commands and orphans reparented to us); finish the commands."""
        try:
            while os.read(self.sig_r, 4096):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            cmd = self.by_pid.pop(pid, None)
            if cmd is not None:
                code = os.waitstatus_to_exitcode(status)
                self.finish(cmd, 128 - code if code < 0 else code)

    def expire(self) -> None:
        """Kill the process group of every command whose deadline passed."""
        now = time.monotonic()
        while self.deadlines and self.deadlines[0][0] <= now:
            _, rid = heapq.heappop(self.deadlines)
            cmd = self.commands.get(rid)
            if cmd is not None and not cmd.timed_out:
                cmd.timed_out = True
                self.kill_job(cmd)  # a worker job whose pgid is not known yet is killed when it arrives


def main() -> None:
    """Move the host channel off fds 0/1, harden this process, and serve."""
    harden_process()
    rfd = os.dup(0)
    wfd = os.dup(1)
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd, inheritable=False)
    os.close(null)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    Daemon(rfd, wfd).run()


if __name__ == "__main__":
    main()
    sys.exit(0)
