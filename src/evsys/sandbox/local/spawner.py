"""The sandbox spawner: a small, long-lived helper process that starts bubblewrap for the host.

Forking the orchestrator itself (tens of MB, many threads' worth of state) costs milliseconds of CPU per
sandbox plus copy-on-write faults afterwards, and the parent must wait for the child's setup. This process is
a bare `python3 -I -S`, started once per orchestrator by `evsys.sandbox.local.spawn`; it starts each sandbox
with posix_spawn (vfork + exec, no copy of itself) of `evsysd --setup` (native/setup.c), which creates and
joins the sandbox's cgroups, gives it its network namespace, builds its private mounts and execs bwrap. It is
stdlib only and is run as a script (never imported into the orchestrator).

Protocol on a SOCK_SEQPACKET unix socket (fd number in argv[1]), one message per request and per reply:
  request: marshal {"argv": [...], "setup": mounts.ChildSetup.params}, ancillary fds = the fds to pass to
           bwrap; an argv item "@fd<i>" is replaced by the number the i-th passed fd has in the child.
  reply:   marshal {"pid": n} with fds [pidfd, stdin writer, stdout reader, stderr reader, setup-error reader]
           or {"error": text} without fds ({"error": text, "dirs_refused": 1} when a cgroup directory of
           `setup["cgroup_dirs"]`, which this process creates before the child, could not be made: then none
           of them exists).
  or a helper of the host's own (the reset helper):
  request: marshal {"helper": [argv...], "at": [n...]}, ancillary fds = the fds the helper gets, the i-th as
           fd number at[i]; reply {"pid": n} with fds [pidfd] or {"error": text}. The helper reports its
           outcome itself (its exit status is reaped here and not passed on).
A setup failure is written to the setup-error pipe, which otherwise just closes at exec. The spawner exits
when the orchestrator goes away (EOF on the socket); bwrap's --die-with-parent then takes every sandbox down.
"""

from __future__ import annotations

import fcntl
import marshal
import os
import select
import signal
import socket
import sys
from typing import Any

MAX_MESSAGE = 1 << 20
MAX_FDS = 16


class DirsRefused(Exception):
    """A cgroup directory of the request could not be made; none of its directories is left."""


def make_dirs(paths: list[str]) -> None:
    """Create the sandbox's cgroup directories (here, not in the orchestrator: creating cgroups is kernel work
    of ~0.5 ms each that this process does on another core). On failure remove the ones made and raise
    DirsRefused naming the one that failed."""
    made: list[str] = []
    for path in paths:
        try:
            os.mkdir(path)
        except OSError as exc:
            remove_dirs(made)
            if isinstance(exc, FileExistsError):
                raise DirsRefused(f"cgroup {path} already exists (left by an earlier run?)") from None
            raise DirsRefused(f"cannot create cgroup {path}: {exc.strerror}") from None
        made.append(path)


def remove_dirs(paths: list[str]) -> None:
    """Remove directories this process made for a request that then failed (nothing joined them; children
    first)."""
    for path in reversed(paths):
        try:
            os.rmdir(path)
        except OSError:
            pass


def spawn(req: dict[str, Any], passed: list[int]) -> tuple[int, list[int]]:
    """Start the setup helper for `req` (it execs bwrap); return its pid and the fds the host gets: pidfd and
    its pipe ends. posix_spawn (vfork + exec) instead of fork: forking this Python process cost ~1.4 ms of
    CPU plus copy-on-write faults per sandbox on a VM."""
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    report_r, report_w = os.pipe()
    setup = req["setup"]
    names = {f"@fd{i}": str(fd) for i, fd in enumerate(passed)}
    argv = [names.get(arg, arg) for arg in req["argv"]]
    helper = setup["helper"]
    helper_argv = [helper, "--setup", str(report_w), setup["mount_point"], str(setup["storage_bytes"])]
    helper_argv += [":".join(setup["lowers"]), str(setup["agent_uid"]), *setup["items"], "--", *argv]
    for fd in (*passed, report_w):
        os.set_inheritable(fd, True)
    dirs = setup.get("cgroup_dirs", [])
    try:
        make_dirs(dirs)
    except DirsRefused:
        for fd in (stdin_r, out_w, err_w, report_w, stdin_w, out_r, err_r, report_r):
            os.close(fd)
        raise
    try:
        pid = os.posix_spawn(
            helper,
            helper_argv,
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, stdin_r, 0),
                (os.POSIX_SPAWN_DUP2, out_w, 1),
                (os.POSIX_SPAWN_DUP2, err_w, 2),
            ],
            setsigmask=(),
            setsigdef=(signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ),
        )
    except OSError:
        remove_dirs(dirs)
        for fd in (stdin_w, out_r, err_r, report_r):
            os.close(fd)
        raise
    finally:
        for fd in (stdin_r, out_w, err_w, report_w):
            os.close(fd)
    pidfd = os.pidfd_open(pid)  # the child is not reaped before its next SIGCHLD wakeup, so pid is valid
    return pid, [pidfd, stdin_w, out_r, err_r, report_r]


def start_helper(req: dict[str, Any], passed: list[int]) -> tuple[int, list[int]]:
    """Start a host helper (`req["helper"]`, an argv) with the i-th passed fd as its fd `req["at"][i]` and an
    empty environment; its pid and [pidfd]. The passed fds are first copied above every target number, so no
    dup2 of the file actions overwrites one still to be placed."""
    top = max(req["at"], default=2)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, top + 1) for fd in passed]
    try:
        actions = [(os.POSIX_SPAWN_DUP2, fd, at) for fd, at in zip(high, req["at"], strict=True)]
        argv = req["helper"]
        defaults = (signal.SIGCHLD, signal.SIGPIPE)
        pid = os.posix_spawn(argv[0], argv, {}, file_actions=actions, setsigdef=defaults)
    finally:
        for fd in high:
            os.close(fd)
    return pid, [os.pidfd_open(pid)]


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
            req = marshal.loads(msg)
            pid, fds = start_helper(req, passed) if "helper" in req else spawn(req, passed)
            reply: dict[str, int | str] = {"pid": pid}
        except DirsRefused as exc:
            fds, reply = [], {"error": str(exc), "dirs_refused": 1}
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
