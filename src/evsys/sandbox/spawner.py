"""The sandbox spawner: a small, long-lived helper process that forks and execs bubblewrap for the host.

Forking the orchestrator itself (tens of MB, many threads' worth of state) costs milliseconds of CPU per
sandbox plus copy-on-write faults afterwards, and the parent must wait for the child's setup. This process is
a bare `python3 -I -S` (a few MB), started once per orchestrator by `evsys.sandbox.spawn`, so its forks are
cheap. It is stdlib only and is run as a script (never imported into the orchestrator).

Protocol on a SOCK_SEQPACKET unix socket (fd number in argv[1]), one message per request and per reply:
  request: marshal {"argv": [...], "setup": ChildSetup kwargs}, ancillary fds = the fds to pass to bwrap;
           an argv item "@fd<i>" is replaced by the number the i-th passed fd has in the child.
  reply:   marshal {"pid": n} with fds [pidfd, stdin writer, stdout reader, stderr reader, setup-error reader]
           or {"error": text} without fds.
The child joins the sandbox's cgroups and builds its private mounts (mounts.ChildSetup), then execs; a setup
failure is written to the setup-error pipe, which otherwise just closes at exec. The spawner exits when the
orchestrator goes away (EOF on the socket); bwrap's --die-with-parent then takes every sandbox down with it.
"""

from __future__ import annotations

import marshal
import os
import select
import signal
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mounts import ChildSetup

MAX_MESSAGE = 1 << 20
MAX_FDS = 16


def _child(req: dict, passed: list[int], stdin_r: int, out_w: int, err_w: int, report_w: int) -> None:
    """In the forked child: set up cgroups and mounts, wire the pipes, exec. Never returns."""
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        ChildSetup(**req["setup"])._setup()
        os.dup2(stdin_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        for fd in passed:
            os.set_inheritable(fd, True)
        names = {f"@fd{i}": str(fd) for i, fd in enumerate(passed)}
        argv = [names.get(arg, arg) for arg in req["argv"]]
        os.execv(argv[0], argv)
    except BaseException as exc:  # reported to the host through the setup-error pipe
        try:
            os.write(report_w, (str(exc) or type(exc).__name__).encode("utf-8", "replace")[:4000])
        finally:
            os._exit(127)


def spawn(req: dict, passed: list[int]) -> tuple[int, list[int]]:
    """Fork one child for `req`; return its pid and the fds the host gets: pidfd and its pipe ends."""
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    report_r, report_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(req, passed, stdin_r, out_w, err_w, report_w)
    for fd in (stdin_r, out_w, err_w, report_w):
        os.close(fd)
    pidfd = os.pidfd_open(pid)  # the child is not reaped before its next SIGCHLD wakeup, so pid is valid
    return pid, [pidfd, stdin_w, out_r, err_r, report_r]


def reap() -> None:
    """Collect every exited child (the host watches them through their pidfds)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve(sock: socket.socket) -> None:
    """Answer requests until the host closes its end."""
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    while True:
        ready = {fd for fd, _ in poller.poll()}
        if wake_r in ready:
            while True:
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    break
            reap()
        if sock.fileno() not in ready:
            continue
        msg, passed, _, _ = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
        if not msg:
            return
        try:
            pid, fds = spawn(marshal.loads(msg), passed)
            reply = {"pid": pid}
        except Exception as exc:
            fds, reply = [], {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            for fd in passed:
                os.close(fd)
        socket.send_fds(sock, [marshal.dumps(reply)], fds)
        for fd in fds:
            os.close(fd)


def main() -> None:
    """Entry point: `python3 -I -S spawner.py <socket fd>`."""
    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.set_inheritable(False)
    serve(sock)


if __name__ == "__main__":
    main()
