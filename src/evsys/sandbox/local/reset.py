"""Resetting a running local sandbox to its just-started state, for reuse by the next trial (a "slot").

The daemon first kills every other process in the sandbox; then `evsysd --reset` (native/reset.c) runs on the
host: it puts back what the daemon passes on to every command (its rlimits, oom_score_adj, coredump_filter,
autogroup nice) as the daemon reported it at start (native/inherited.c), refuses when TCP sockets linger in
the sandbox's network namespace, empties its IPC namespace, and pivots the sandbox onto a new overlay (fresh
upper layer on the same cached lower layers) with fresh /tmp, /dev (read-only), /dev/pts, /dev/shm and job
tmpfs, moving the read-only system binds, /proc and the task's binds over. Namespaces, cgroups, bwrap, the
daemon and the agent's uid are kept, which is what makes a reset several times cheaper than stop + start.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

from evsys.sandbox.base import SandboxError
from evsys.sandbox.local.client import Header
from evsys.sandbox.local.spawn import start_helper
from evsys.sandbox.local.waits import wait_exit
from evsys.util.procfs import children

REPORT_FD, BWRAP_PIDFD, DAEMON_PIDFD, USERNS_FD = 3, 4, 5, 6
HELPER_TIMEOUT = 30.0  # seconds; a reset takes milliseconds
SUCCESS = b"K"  # the helper's last datagram when the reset is done (its exit status is the spawner's)
# agent uid -> an fd of the user namespace mapping the layers' agent uid to it (native/idmap.c), made by the
# helper on the first reset of a sandbox with that uid and kept: making one (a clone) was most of the CPU a
# reset's idmapped root cost. Uids are handed out lowest first, so this holds about as many as sandboxes ran
# at once; past MAX_KEPT_USERNS none is kept.
_USERNS: dict[int, int] = {}
MAX_KEPT_USERNS = 256


@dataclass(frozen=True)
class ResetTarget:
    """What the reset helper needs to know about one running sandbox."""

    helper: str  # the evsysd binary on the host
    daemon_pid: int  # host pid of the daemon (the sandbox's pid 1), for its /proc entries
    # pidfds of bwrap (whose mount namespace holds the setup's storage mounts) and of the daemon: namespaces
    # are entered through them, never through a pid that could have been reused
    bwrap_pidfd: int
    daemon_pidfd: int
    mount_point: str
    storage_bytes: int
    lowers: tuple[str, ...]
    tmp_bytes: int
    jobs_bytes: int
    agent_uid: int  # the same uid again: the new root's agent files belong to it (native/idmap.c)
    shm_bytes: int
    # what the daemon passes on to every command, as its ready frame reported it at start (inherited_state)
    inherited: tuple[str, ...]

    @classmethod
    def open(cls, bwrap_pid: int, daemon_pid: int, **fields: Any) -> ResetTarget:
        """A target for the sandbox of bwrap `bwrap_pid`, with pidfds of both processes (`close_target`)."""
        try:
            bwrap_fd = os.pidfd_open(bwrap_pid)
        except OSError as exc:
            raise SandboxError(f"the sandbox's processes are gone: {exc.strerror}") from None
        try:
            daemon_fd = os.pidfd_open(daemon_pid)
        except OSError as exc:
            os.close(bwrap_fd)
            raise SandboxError(f"the sandbox's processes are gone: {exc.strerror}") from None
        return cls(daemon_pid=daemon_pid, bwrap_pidfd=bwrap_fd, daemon_pidfd=daemon_fd, **fields)

    def argv(self, *, kept_userns: bool = False) -> list[str]:
        """The helper's command line (`kept_userns`: the uid's mapping namespace is passed as USERNS_FD)."""
        return [
            self.helper,
            "--reset",
            str(REPORT_FD),
            str(BWRAP_PIDFD),
            str(DAEMON_PIDFD),
            str(self.daemon_pid),
            self.mount_point,
            str(self.storage_bytes),
            ":".join(self.lowers),
            str(self.tmp_bytes),
            str(self.jobs_bytes),
            str(self.agent_uid),
            str(self.shm_bytes),
            str(USERNS_FD) if kept_userns else "-",
            *self.inherited,
        ]


def close_target(target: ResetTarget | None) -> None:
    """Release the pidfds a ResetTarget holds."""
    if target is not None:
        for fd in (target.bwrap_pidfd, target.daemon_pidfd):
            os.close(fd)


def daemon_pid(bwrap_pid: int) -> int:
    """The host pid of the sandbox's init (bwrap's only child)."""
    found = children(bwrap_pid)
    if len(found) != 1:
        raise SandboxError(f"bwrap {bwrap_pid} has {len(found)} children, expected the daemon alone")
    return found[0]


def inherited_state(ready: Header) -> tuple[str, ...]:
    """What the daemon passes on to every command, from its ready frame (native/inherited.c), as the reset
    helper takes it: its rlimits, oom_score_adj, coredump_filter and autogroup."""
    values = [ready.get(key) for key in ("limits", "oom_score_adj", "coredump_filter", "autogroup")]
    strings = tuple(value for value in values if isinstance(value, str))
    if len(strings) != len(values) or not strings[0]:
        raise SandboxError("the sandbox's daemon did not report what it passes on to its commands")
    return strings


async def run_reset_helper(target: ResetTarget) -> None:
    """Run `evsysd --reset` (started by the sandbox spawner, awaited through a pidfd); SandboxError with its
    report unless it reported success. The report comes back over a unix datagram socket: its error text, or
    the mapping namespace it made and then SUCCESS."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    fds = {REPORT_FD: theirs.fileno(), BWRAP_PIDFD: target.bwrap_pidfd, DAEMON_PIDFD: target.daemon_pidfd}
    kept = _USERNS.get(target.agent_uid)
    if kept is not None:
        fds[USERNS_FD] = kept
    with ours:
        try:
            with theirs:
                pidfd = await start_helper(target.argv(kept_userns=kept is not None), fds)
        except SandboxError as exc:
            raise SandboxError(f"cannot start the reset helper {target.helper}: {exc}") from None
        if not await wait_exit(pidfd, HELPER_TIMEOUT):
            raise SandboxError(f"reset helper did not finish within {HELPER_TIMEOUT:g} s")
        report, succeeded = _read_report(ours, target.agent_uid)
    if not succeeded:
        raise SandboxError(f"reset failed: {report or 'the reset helper exited without reporting success'}")


def _read_report(sock: socket.socket, agent_uid: int) -> tuple[str, bool]:
    """What the exited helper sent: its error text, a mapping namespace to keep for `agent_uid`, and whether
    it reported SUCCESS."""
    sock.setblocking(False)
    text: list[str] = []
    succeeded = False
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, 4096, 1)
        except BlockingIOError:
            return "".join(text).strip(), succeeded and not text
        for fd in fds:
            os.set_inheritable(fd, False)
            if data == b"U" and agent_uid not in _USERNS and len(_USERNS) < MAX_KEPT_USERNS:
                _USERNS[agent_uid] = fd
            else:
                os.close(fd)
        if data == SUCCESS:
            succeeded = True
        elif data != b"U":
            text.append(data.decode("utf-8", "replace"))
