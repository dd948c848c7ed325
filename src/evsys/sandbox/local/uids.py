"""Per-sandbox agent uids: every running local sandbox's `agent` is a host uid no other sandbox and no host
user has, and the owner of the sandbox's user namespace.

Why an owner: the kernel keeps its per-user counters (inotify instances and watches, processes against
RLIMIT_NPROC, POSIX message queue bytes, pending signals, locked memory: kernel/ucount.c) per (user namespace,
uid) and charges each use up the chain of namespaces, at every level to the owner of the namespace below. A
sandbox's processes run in a namespace of its own that maps every id to itself (native/idmap.c,
`enter_owned_userns`: ids, file owners and the set*id filter are as on the host) and is owned by this uid. So
root, `nobody`, a system uid or the agent in one sandbox is counted in that sandbox's namespace and, on the
host, against this uid alone: measured, a sandbox holding all 128 inotify instances, all message-queue bytes
or 63 processes under an RLIMIT_NPROC of 64 as `nobody` leaves another sandbox's `nobody` the full quota,
where without the namespace it got none. A namespace owned by host root would charge every sandbox to root's
one count; one owned by a uid two sandboxes share would make them share it. The counters kept per host uid
alone (pipe pages, epoll watches, fds in flight over unix sockets) stay shared for system uids
(docs/sandbox.md).

Each sandbox holds a block of UID_BLOCK uids (the agent's is the first; the others are for extra users of the
sandbox, e.g. shared slots, `LocalSandbox.extra_uid`), the only ones its root may switch to besides root and
system ids (uidfilter.py). A block is taken from AGENT_UID_FIRST upwards by holding an exclusive `flock` on
`<scratch>/uids/<first uid>` for the sandbox's life: concurrent evsys processes on one host never pick the
same block, and a SIGKILLed orchestrator's blocks are free again at once (the kernel drops its locks). The
lowest free block is taken, so a host keeps reusing a handful. The cached layers store the agent's files as
LAYER_AGENT_UID; idmapped mounts show them as the sandbox's uid (native/idmap.c), and the sandbox's
/etc/passwd names it `agent`.

What a start costs: one allocator per process and lock directory (`_Allocator`) keeps each block's lock file
open once it has used it, unlocked while the block is free, so taking a block again is one `flock` on an
open file (no path lookup, which slows down while many sandboxes mount and unmount); a block not used before
is opened relative to the lock directory's descriptor. The host's users are read once and again only when
/etc/passwd changes or HOST_USERS_TTL seconds have passed (not on every start).
"""

from __future__ import annotations

import fcntl
import os
import pwd
import threading
import time
from pathlib import Path

from evsys.sandbox.base import SandboxError

LAYER_AGENT_UID = 1000
AGENT_UID_FIRST = 100_000
# uids per sandbox: its agent's, then its extra users' (at most 31 shared slots); 1,875 sandboxes per host
UID_BLOCK = 32
AGENT_UID_COUNT = (
    60_000  # below 165536: the usual start of the host's subordinate-uid ranges is 100000 + 65536
)
_END = AGENT_UID_FIRST + AGENT_UID_COUNT
HOST_USERS_TTL = 10.0  # seconds a read of the host's users is trusted while /etc/passwd is unchanged
BUSY_RECHECK = 1.0  # seconds before a block another process held is tried again ahead of higher ones
_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC

_held: set[int] = set()  # blocks held in this process, whatever their lock directory
_lowest = [AGENT_UID_FIRST]  # every block below it is in _held (where a search for a free one starts)
_lock = threading.Lock()


class _HostUsers:
    """The blocks a host user has a uid of (`pwd.getpwall`), read again when /etc/passwd changes or the
    reading is old."""

    def __init__(self) -> None:
        self._blocks: frozenset[int] = frozenset()
        self._stamp: tuple[int, int, int] | None = None
        self._read_at = 0.0

    def blocks(self) -> frozenset[int]:
        """The first uids of the blocks some host user has a uid of."""
        try:
            st = os.stat("/etc/passwd")
            stamp: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        now = time.monotonic()
        if stamp is None or stamp != self._stamp or now - self._read_at > HOST_USERS_TTL:
            uids = {user.pw_uid for user in pwd.getpwall()}
            self._blocks = frozenset(
                uid - (uid - AGENT_UID_FIRST) % UID_BLOCK for uid in uids if uid >= AGENT_UID_FIRST
            )
            self._stamp, self._read_at = stamp, now
        return self._blocks


class _Allocator:
    """The blocks of one lock directory: the lock files this process opened, kept open between uses."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._dir_fd = -1
        self._files: dict[int, int] = {}  # block -> its open lock file (locked iff the block is in _held)
        self.busy: dict[int, float] = {}  # block -> when another process was last found holding it

    def _open(self, uid: int) -> int:
        """The lock file of block `uid`: the open one when it is still linked, else opened anew."""
        fd = self._files.pop(uid, -1)
        if fd >= 0:
            if os.fstat(fd).st_nlink > 0:
                return fd
            os.close(fd)  # the file was removed: a lock on it would exclude no one
        if self._dir_fd >= 0 and os.fstat(self._dir_fd).st_nlink == 0:
            os.close(self._dir_fd)
            self._dir_fd = -1
        if self._dir_fd < 0:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return os.open(str(uid), _OPEN_FLAGS, 0o600, dir_fd=self._dir_fd)

    def take(self, uid: int) -> bool:
        """Lock block `uid` for this process (not held here yet); False when another process holds it."""
        fd = self._open(uid)
        self._files[uid] = fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another process's sandbox holds it
            self.busy[uid] = time.monotonic()
            return False
        self.busy.pop(uid, None)
        return True

    def give_back(self, uid: int) -> None:
        """Unlock block `uid`; its file stays open for the next time."""
        fd = self._files.get(uid, -1)
        if fd >= 0:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def forget(self) -> None:
        """Close every file without unlocking (a forked child: the locks are its parent's)."""
        for fd in (*self._files.values(), self._dir_fd):
            if fd >= 0:
                os.close(fd)
        self._files.clear()
        self._dir_fd = -1


_allocators: dict[Path, _Allocator] = {}
_host_users = _HostUsers()


def _forget_after_fork() -> None:
    """A forked child starts empty: its parent's blocks and lock files are not its own."""
    global _lock
    _lock = threading.Lock()
    _held.clear()
    _lowest[0] = AGENT_UID_FIRST
    for allocator in _allocators.values():
        allocator.forget()
    _allocators.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


class AgentUid:
    """One allocated uid, held until `release()` (a SIGKILLed process releases it too)."""

    def __init__(self, uid: int, allocator: _Allocator) -> None:
        self.uid = uid
        self._allocator: _Allocator | None = allocator

    def release(self) -> None:
        """Give the uid back (idempotent)."""
        with _lock:
            allocator, self._allocator = self._allocator, None
            if allocator is not None and _allocators.get(allocator.directory) is allocator:
                allocator.give_back(self.uid)  # drops the flock
                _held.discard(self.uid)
                _lowest[0] = min(_lowest[0], self.uid)


def allocate(scratch_root: Path) -> AgentUid:
    """The lowest block of uids from AGENT_UID_FIRST that no other sandbox on this host holds and none of
    whose uids a host user has; the agent's is its first. Blocks another process held less than
    BUSY_RECHECK seconds ago are tried last (so many processes on one host do not each try every block the
    others hold on every start)."""
    directory = scratch_root / "uids"
    host_blocks = _host_users.blocks()
    with _lock:
        allocator = _allocators.get(directory)
        if allocator is None:
            allocator = _allocators[directory] = _Allocator(directory)
        while _lowest[0] in _held:
            _lowest[0] += UID_BLOCK
        recent = time.monotonic() - BUSY_RECHECK
        uid = _take_first(allocator, host_blocks, skip_busy_since=recent)
        if uid is None:
            uid = _take_first(allocator, host_blocks, skip_busy_since=None)
        if uid is None:
            raise SandboxError(f"no free agent uid in {AGENT_UID_FIRST}..{_END - 1}")
        _held.add(uid)
        return AgentUid(uid, allocator)


def _take_first(
    allocator: _Allocator, host_blocks: frozenset[int], skip_busy_since: float | None
) -> int | None:
    """Lock the lowest free block (skipping those found busy after `skip_busy_since`); None when none is."""
    for uid in range(_lowest[0], _END, UID_BLOCK):
        if uid in _held or uid in host_blocks:
            continue
        if skip_busy_since is not None and allocator.busy.get(uid, skip_busy_since) > skip_busy_since:
            continue
        try:
            if allocator.take(uid):
                return uid
        except OSError as exc:
            raise SandboxError(f"cannot take an agent uid in {allocator.directory}: {exc.strerror}") from None
    return None
