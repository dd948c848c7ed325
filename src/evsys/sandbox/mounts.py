"""The per-sandbox mount namespace: a size-limited tmpfs holding the overlay's upper dir, and the overlay
itself.

`ChildSetup` runs in the child the spawner (spawner.py) forks, just before it execs bubblewrap: it joins the
sandbox's cgroups, makes a private mount namespace, mounts a tmpfs (size = storage limit) on the shared
mount point, and mounts the overlay (lower = cached layers, upper = that tmpfs) inside it. The host's mount
table never sees any of it, and the whole namespace disappears with the sandbox's last process, so teardown
leaks nothing even after a SIGKILL.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

CLONE_NEWNS = 0x00020000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REC = 0x4000
MS_PRIVATE = 1 << 18

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.unshare.argtypes = [ctypes.c_int]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: bytes, target: bytes, fstype: bytes | None, flags: int, data: bytes | None) -> None:
    _check(_libc.mount(source, target, fstype, flags, data), f"mount {fstype!r} on {target.decode()}")


class ChildSetup:
    """Everything the forked child does before exec, precomputed so the child only makes system calls."""

    def __init__(
        self, *, mount_point: str, lowers: list[str], storage_bytes: int, cgroup_procs: list[str]
    ) -> None:
        self.mount_point = mount_point.encode()
        self.upper = f"{mount_point}/upper".encode()
        self.work = f"{mount_point}/work".encode()
        self.merged = f"{mount_point}/merged".encode()
        self.tmpfs_opts = f"size={storage_bytes},mode=755".encode()
        self.overlay_opts = (
            f"lowerdir={':'.join(lowers)},upperdir={mount_point}/upper,workdir={mount_point}/work".encode()
        )
        self.cgroup_procs = cgroup_procs
        self.params = {
            "mount_point": mount_point,
            "lowers": list(lowers),
            "storage_bytes": storage_bytes,
            "cgroup_procs": list(cgroup_procs),
        }

    @property
    def root(self) -> str:
        """Where the merged root filesystem appears inside the child's mount namespace."""
        return self.merged.decode()

    def _setup(self) -> None:
        """Join the cgroups, unshare the mount namespace, mount the storage tmpfs and the overlay."""
        for path in self.cgroup_procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        try:  # best effort: spare the daemon from the OOM killer (needs CAP_SYS_RESOURCE)
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("-1000")
        except OSError:
            pass
        _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None)
        _mount(b"evsys-storage", self.mount_point, b"tmpfs", MS_NOSUID | MS_NODEV, self.tmpfs_opts)
        for path in (self.upper, self.work, self.merged):
            os.mkdir(path, 0o755)
        _mount(b"evsys-root", self.merged, b"overlay", MS_NOSUID | MS_NODEV, self.overlay_opts)
