"""The bubblewrap command line of a local sandbox, and the sizes and places it sets up (docs/sandbox.md)."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import PurePosixPath

from evsys.records import SandboxSpec
from evsys.sandbox.local import native, pylayer, rootfs

BWRAP = "/usr/bin/bwrap"
DAEMON_DIR = "/.evsys/daemon"
DAEMON_PATH = f"{DAEMON_DIR}/{native.BINARY_NAME}"
DEFAULT_STORAGE_MB = 1024
DEFAULT_TMP_MB = 512
JOBS_DIR = "/.evsys/jobs"
JOBS_TMPFS_MB = 64
DEFAULT_SHM_MB = 64  # like Docker's default /dev/shm
# Capabilities kept by the daemon and by commands run as "root"; commands run as "agent" have none.
ROOT_CAPS = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
)
# CAP_SETPCAP lets the daemon shrink its bounding set to ROOT_CAPS; it then drops CAP_SETPCAP itself. It keeps
# CAP_SYS_ADMIN (a verification run's private mounts) and CAP_WAKE_ALARM (the mark of a verification run's
# processes) outside the bounding set: no command gets them but as native/verifier.c says.
DAEMON_EXTRA_CAPS = ("CAP_SETPCAP", "CAP_SYS_ADMIN", "CAP_WAKE_ALARM")
# Kernel knobs under /proc that a uid-0 process could write by file mode alone: covered read-only.
PROC_RO = ("sys", "sysrq-trigger", "mtrr", "pressure", "acpi", "scsi", "fs", "irq", "bus")


@functools.cache
def _proc_ro() -> tuple[str, ...]:
    """The PROC_RO entries this kernel's /proc has (looked up once per process, not per start)."""
    return tuple(name for name in PROC_RO if os.path.lexists(f"/proc/{name}"))


def storage_size_mb(spec: SandboxSpec) -> int:
    """The size of the sandbox's writable layer."""
    return spec.storage_mb or DEFAULT_STORAGE_MB


def tmp_size_mb(spec: SandboxSpec) -> int:
    """The size of the sandbox's /tmp (a tmpfs)."""
    return min(storage_size_mb(spec), DEFAULT_TMP_MB)


def shm_size_mb(spec: SandboxSpec) -> int:
    """The size of the sandbox's /dev/shm (a tmpfs, mode 1777)."""
    return min(storage_size_mb(spec), DEFAULT_SHM_MB)


def bwrap_argv(
    spec: SandboxSpec,
    root: str,
    daemon_file: str,
    seccomp_fd_arg: str,
    *,
    agent_uid: int,
    daemon_args: Sequence[str] = (),
) -> list[str]:
    """The bwrap command line of a sandbox for `spec` whose root (the overlay) is mounted at `root`; its
    daemon runs commands as `agent_uid` for the agent user. /dev is read-only (nothing can fill it) but for
    /dev/shm, a size-limited tmpfs every user can write (POSIX semaphores, multiprocessing locks)."""
    argv = [
        BWRAP,
        "--unshare-ipc",
        "--unshare-pid",
        "--as-pid-1",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    # no --unshare-net: the setup step gave the sandbox its network namespace (loopback up, low ports open;
    # native/setup.c), or a pod member joins its pod's; `public` attaches slirp4netns to it (slirp.py)
    argv += ["--die-with-parent", "--new-session", "--hostname", "evsys", "--bind", root, "/"]
    for name, target in rootfs.host_system_entries() if spec.image is None else ():
        if name == "usr" and spec.host_python:  # the overlay's /usr, its own /usr/local (pylayer.py)
            argv += pylayer.usr_binds()
        elif target is None:  # the host rootfs: its system dirs read-only (an image brings its own)
            argv += ["--ro-bind", f"/{name}", f"/{name}"]
    tmp_mb = tmp_size_mb(spec)
    argv += ["--ro-bind", daemon_file, DAEMON_DIR, "--proc", "/proc", "--dev", "/dev"]
    for name in _proc_ro():
        argv += ["--ro-bind", f"/proc/{name}", f"/proc/{name}"]
    argv += ["--size", str(tmp_mb * 1024 * 1024), "--tmpfs", "/tmp", "--chmod", "1777", "/tmp"]
    argv += ["--size", str(shm_size_mb(spec) * 1024 * 1024), "--perms", "1777", "--tmpfs", "/dev/shm"]
    argv += ["--remount-ro", "/dev"]
    # the daemon's per-command scripts and FIFOs live in memory, not on the overlay (cheaper)
    argv += ["--size", str(JOBS_TMPFS_MB * 1024 * 1024), "--perms", "0711", "--tmpfs", JOBS_DIR]
    for bind in spec.binds:
        for parent in reversed(PurePosixPath(bind.dst).parents[:-1]):  # traversable mount-point parents
            argv += ["--perms", "0755", "--dir", str(parent)]
        argv += ["--ro-bind" if bind.read_only else "--bind", str(bind.src), bind.dst]
    argv += ["--cap-drop", "ALL"]
    for cap in ROOT_CAPS + DAEMON_EXTRA_CAPS:
        argv += ["--cap-add", cap]
    argv += ["--seccomp", seccomp_fd_arg, "--chdir", "/", DAEMON_PATH, str(agent_uid), *daemon_args]
    return argv
