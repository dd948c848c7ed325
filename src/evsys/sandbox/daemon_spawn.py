"""Streaming processes for the exec daemon (stdlib only; runs inside the sandbox next to daemon.py).

`exec` runs a command to completion and returns its output; `spawn` starts a long-lived process with its stdin
kept open and its output is sent to the host as soon as it is read (harnesses, servers, the proxy forwarder).

Requests:  {"op": "spawn", "id", "argv": [...], "cwd", "env", "user", "timeout"}  payload = initial stdin
           {"op": "write", "target": id}  payload = more stdin (ignored once the process has ended)
           {"op": "eof", "target": id}    close stdin after what was written
           {"op": "signal", "target": id, "sig": n, "tree": bool}
Responses: {"op": "started", "id", "pid"}, then "out" frames and the final "exit" frame, as for exec.
`signal` with `tree` SIGKILLs the process, its process group, its session and every descendant (a
double-forked daemon that called setsid is still a descendant until it is reparented; `kill` of the whole
sandbox catches the rest)."""

from __future__ import annotations

import _signal as signal  # the C module: `signal` would import enum, slowing startup
import posix as os  # the C module: startup cost (see daemon.py)
import select
import time

from daemon_os import live_pids

TYPE_CHECKING = False
if TYPE_CHECKING:
    from daemon import Command

SPAWN_WRAPPER = 'exec -- "$@"'  # bash -c: PATH lookup; "not found" is exit 127 with a message


class SpawnMixin:
    """The spawn/write/eof/signal requests of the daemon (mixed into `Daemon`)."""

    def spawn(self, req: dict, payload: bytes) -> None:
        """Start `argv` with an open stdin pipe; its output streams to the host as it comes."""
        argv = req.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a for a in argv):
            self.send({"op": "error", "id": req.get("id"), "message": "spawn needs a non-empty argv"})
            return
        req["cmd"] = SPAWN_WRAPPER
        req["argv_tail"] = ["evsys-spawn", *argv]
        req["stdin"] = True
        cmd = self.start_forked(req, payload)
        cmd.stream = True
        self.send({"op": "started", "id": cmd.rid, "pid": cmd.pid})

    def feed(self, req: dict, payload: bytes) -> None:
        """Append to a spawned process's stdin (or note end-of-input)."""
        cmd = self.commands.get(req.get("target"))
        if cmd is None or not cmd.stream or cmd.stdin_fd < 0:
            return
        if req.get("op") == "eof":
            cmd.eof = True
        if payload:
            cmd.stdin_data = memoryview(bytes(cmd.stdin_data) + payload)
        if cmd.stdin_data:
            self.poller.modify(cmd.stdin_fd, select.EPOLLOUT)
        elif cmd.eof:
            self.close_stdin(cmd)

    def stdin_idle(self, cmd: Command) -> None:
        """Everything written: wait for more input (spawned processes) or close stdin (exec)."""
        if cmd.stream and not cmd.eof:
            self.poller.modify(cmd.stdin_fd, 0)
        else:
            self.close_stdin(cmd)

    def signal_process(self, req: dict) -> None:
        """Deliver a signal to a spawned process (its whole tree when asked)."""
        cmd = self.commands.get(req.get("target"))
        if cmd is None or not cmd.pid:
            return
        sig = int(req.get("sig") or signal.SIGKILL)
        if req.get("tree"):
            kill_tree(cmd.pid)
            return
        try:
            os.killpg(cmd.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _process_table() -> dict[int, tuple[int, int, int]]:
    """pid -> (ppid, pgrp, session) of every live process."""
    table = {}
    for pid in live_pids():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        table[pid] = (int(fields[1]), int(fields[2]), int(fields[3]))
    return table


def tree_of(root: int, table: dict[int, tuple[int, int, int]]) -> set[int]:
    """`root`, its descendants, and every process in its process group or session."""
    found = {pid for pid, (_, pgrp, sid) in table.items() if pid == root or root in (pgrp, sid)}
    changed = True
    while changed:
        changed = False
        for pid, (ppid, _, _) in table.items():
            if (ppid in found or ppid == root) and pid not in found:
                found.add(pid)
                changed = True
    return found


def kill_tree(root: int) -> None:
    """SIGKILL `root`'s tree until nothing of it is left (bounded: 2 s)."""
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        victims = tree_of(root, _process_table()) - {1, os.getpid()}
        if not victims:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.001)
