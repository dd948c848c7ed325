"""Process and privilege helpers of the exec daemon (stdlib only; runs inside the sandbox with daemon.py)."""

from __future__ import annotations

import _ctypes  # the C module: the `ctypes` package is slow to import
import _signal as signal  # the C module: `signal` would import enum, slowing startup
import posix as os  # the C module: `os` loads posixpath, stat, _collections_abc (~1.3 ms per start)
import time

CHUNK = 1 << 16
AGENT_UID = 1000
PR_SET_NO_NEW_PRIVS = 38
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_LOWER = 3
CAP_SETPCAP = 8
# CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID: what "root" commands keep.
KEEP_CAPS = (0, 1, 3, 4, 5, 6, 7)


def killpg(pgid: int) -> None:
    """SIGKILL a process group if it still exists."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def drain(fd: int, buf: bytearray) -> None:
    """Read everything currently in a non-blocking pipe."""
    while True:
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        if not data:
            return
        buf += data


def free_bytes(path: str) -> int:
    """Bytes available to unprivileged users on the filesystem holding `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def exec_child(req: dict, in_fd: int, out_fd: int, err_fd: int, argv: list[str] | None = None) -> None:
    """In the forked child: new session, drop to the user, enter cwd, exec `bash -c`. Never returns."""
    try:
        os.setsid()
        os.dup2(in_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("0")
        except OSError:
            pass
        if req.get("user", "agent") != "root":
            os.setgroups([])
            os.setgid(AGENT_UID)
            os.setuid(AGENT_UID)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        try:
            os.chdir(req.get("cwd") or "/")
        except OSError as exc:
            os.write(
                2, f"evsys: cannot enter working directory {req.get('cwd')!r}: {exc.strerror}\n".encode()
            )
            os._exit(126)
        os.execve("/bin/bash", argv or ["bash", "-c", req["cmd"]], req.get("env") or {})
    except BaseException as exc:
        try:
            os.write(2, f"evsys: cannot start command: {exc}\n".encode())
        finally:
            os._exit(127)


def kill_all(exclude: set[int]) -> int:
    """SIGKILL every other process in this pid namespace; wait until they are gone; return the count."""
    me = os.getpid()
    victims = [p for p in live_pids() if p not in (1, me) and p not in exclude]
    if not victims:
        return 0
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if not [p for p in live_pids() if p not in (1, me)]:
            break
        time.sleep(0.001)
    return len(victims)


def live_pids() -> list[int]:
    """Pids in /proc that are not zombies."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X"):
            pids.append(int(name))
    return pids


class _Int(_ctypes._SimpleCData):
    _type_ = "i"


class _UInt32(_ctypes._SimpleCData):
    _type_ = "I"


class _CFunc(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Int


class _Libc:
    """libc's prctl and capset through the `_ctypes` C module: the `ctypes` package costs ~4 ms of CPU at
    every sandbox start, this ~1 ms."""

    def __init__(self) -> None:
        self._handle = _ctypes.dlopen(None, 0)
        self.prctl = _CFunc(("prctl", self))
        self.capset = _CFunc(("capset", self))


class _CapHeader(_ctypes.Structure):
    _fields_ = [("version", _UInt32), ("pid", _Int)]


class _CapData(_ctypes.Structure):
    _fields_ = [
        ("effective", _UInt32),
        ("permitted", _UInt32),
        ("inheritable", _UInt32),
    ]


def restrict_capabilities(libc: _Libc) -> None:
    """Shrink the bounding set to KEEP_CAPS, then drop CAP_SETPCAP from every other set (fails loudly)."""
    for cap in range(64):
        if (
            cap not in KEEP_CAPS
            and libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0
            and _ctypes.get_errno() != 22
        ):
            raise OSError(_ctypes.get_errno(), f"cannot drop capability {cap} from the bounding set")
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER, CAP_SETPCAP, 0, 0)
    keep = sum(1 << c for c in KEEP_CAPS)
    data = (_CapData * 2)(_CapData(keep, keep, keep), _CapData(0, 0, 0))
    if libc.capset(_ctypes.byref(_CapHeader(0x20080522, 0)), data) != 0:
        raise OSError(_ctypes.get_errno(), "capset failed")


def harden_process() -> None:
    """no_new_privs, the small capability set, then non-dumpable (so /proc/1/* needs CAP_SYS_PTRACE)."""
    libc = _Libc()
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    restrict_capabilities(libc)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # after capset, which could reset it
