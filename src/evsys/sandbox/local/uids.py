"""Per-sandbox agent uids: every running local sandbox's `agent` is a host uid no other sandbox and no host
user has, so kernel per-uid quotas (inotify instances and watches, RLIMIT_NPROC, POSIX message queue bytes,
pending signals...) are never shared.

Each sandbox holds a block of UID_BLOCK uids (the agent's is the first; the others are for extra users of the
sandbox, e.g. shared slots, `LocalSandbox.extra_uid`), the only ones its root may switch to besides root and
system ids (uidfilter.py). A block is taken from AGENT_UID_FIRST upwards by holding an exclusive `flock` on
`<scratch>/uids/<first uid>` for the sandbox's life: concurrent evsys processes on one host never pick the
same block, and a SIGKILLed orchestrator's blocks are free again at once (the kernel drops its locks). The
lowest free block is taken, so a host keeps reusing a handful. The cached layers store the agent's files as
LAYER_AGENT_UID; idmapped mounts show them as the sandbox's uid (native/idmap.c), and the sandbox's
/etc/passwd names it `agent`.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import threading
from pathlib import Path

from evsys.sandbox.base import SandboxError

LAYER_AGENT_UID = 1000
AGENT_UID_FIRST = 100_000
# uids per sandbox: its agent's, then its extra users' (at most 31 shared slots); 1,875 sandboxes per host
UID_BLOCK = 32
AGENT_UID_COUNT = (
    60_000  # below 165536: the usual start of the host's subordinate-uid ranges is 100000 + 65536
)

_held: set[int] = set()
_lock = threading.Lock()


class AgentUid:
    """One allocated uid, held until `release()` (a SIGKILLed process releases it too)."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = uid
        self._fd = fd

    def release(self) -> None:
        """Give the uid back (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)  # drops the flock
            self._fd = -1
            with _lock:
                _held.discard(self.uid)


def _host_user(first: int, host_uids: set[int]) -> bool:
    """Whether a host user has a uid of the block starting at `first`."""
    return any(uid in host_uids for uid in range(first, first + UID_BLOCK))


def _open_lock(directory: Path, uid: int) -> int:
    try:
        return os.open(directory / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        directory.mkdir(parents=True, exist_ok=True)
        return os.open(directory / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _next_unheld(start: int, end: int) -> int | None:
    """The lowest block from `start` this process does not hold, now marked held; None when all are."""
    with _lock:  # once per candidate, not once per held block: cheap at high concurrency
        uid = next((u for u in range(start, end, UID_BLOCK) if u not in _held), None)
        if uid is not None:
            _held.add(uid)
        return uid


def _unhold(uid: int) -> None:
    with _lock:
        _held.discard(uid)


def allocate(scratch_root: Path) -> AgentUid:
    """The lowest block of uids from AGENT_UID_FIRST that no other sandbox on this host holds and none of
    whose uids a host user has; the agent's is its first."""
    directory = scratch_root / "uids"
    host_uids = {user.pw_uid for user in pwd.getpwall()}
    end = AGENT_UID_FIRST + AGENT_UID_COUNT
    uid = _next_unheld(AGENT_UID_FIRST, end)
    while uid is not None:
        try:
            fd = _open_lock(directory, uid)
        except OSError as exc:
            _unhold(uid)
            raise SandboxError(f"cannot take an agent uid in {directory}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another process's sandbox holds it
            os.close(fd)
        else:
            if not _host_user(uid, host_uids):
                return AgentUid(uid, fd)
            os.close(fd)
        _unhold(uid)
        uid = _next_unheld(uid + UID_BLOCK, end)
    raise SandboxError(f"no free agent uid in {AGENT_UID_FIRST}..{end - 1}")
