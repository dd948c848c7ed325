"""A local sandbox's overlay upper layer — exactly what was written in its root since it started — packed
into a bounded, compressed tar for `evsys run --keep-state` (evsys.records.state).

Whiteouts (0:0 character devices) become `deletions`, opaque directories (`trusted.overlay.opaque`) become
`opaque_dirs`; other device nodes, fifos and sockets are never packed. Regular files are packed until their
content reaches the byte limit; the rest is listed in `cut`. The daemon's own directory is left out.

The layer is read while what the agent left running may still change it, through a path that would resolve
an absolute symlink on the host: every step is opened relative to its directory's descriptor with
O_NOFOLLOW, so a file swapped for a symlink (or a directory for a link to the host's /etc) is never followed.
Symlinks are packed as links; hard links as separate copies.
"""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path
from typing import BinaryIO

from evsys.records.state import KeptState

LEFT_OUT = frozenset({".evsys"})
OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")
MAX_ENTRIES = 200_000
NOFOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _opaque(fd: int) -> bool:
    for name in OPAQUE_XATTRS:
        try:
            if os.getxattr(fd, name) == b"y":
                return True
        except OSError:
            continue
    return False


class _Exactly:
    """A file's content as exactly `size` bytes however it changes while read (cut, or padded with zeros)."""

    def __init__(self, data: BinaryIO, size: int) -> None:
        self.data, self.left = data, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        chunk = self.data.read(n)
        chunk += b"\0" * (n - len(chunk))
        self.left -= n
        return chunk


class _Packer:
    """One walk of an upper layer into an open tar."""

    def __init__(self, tar: tarfile.TarFile, manifest: KeptState, agent_uid: int) -> None:
        self.tar, self.manifest, self.agent_uid = tar, manifest, agent_uid

    def walk(self, dir_fd: int, rel: str) -> None:
        with os.scandir(dir_fd) as it:
            names = sorted(entry.name for entry in it)
        for name in names:
            if not rel and name in LEFT_OUT:
                continue
            try:
                self.entry(dir_fd, name, f"{rel}/{name}" if rel else name)
            except FileNotFoundError:  # removed while the layer was read
                continue

    def entry(self, dir_fd: int, name: str, arc: str) -> None:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        shown, manifest = "/" + arc, self.manifest
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
            manifest.deletions.append(shown)
        elif not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            manifest.skipped.append(shown)
        elif manifest.entries >= MAX_ENTRIES or (
            stat.S_ISREG(st.st_mode) and manifest.size + st.st_size > manifest.limit_bytes
        ):
            manifest.cut.append(shown)
        elif stat.S_ISLNK(st.st_mode):
            self.add(self.info(arc, st, tarfile.SYMTYPE, linkname=os.readlink(name, dir_fd=dir_fd)))
        else:
            self.opened(dir_fd, name, arc)

    def opened(self, dir_fd: int, name: str, arc: str) -> None:
        """A directory (then its entries) or a regular file, opened without following a link."""
        try:
            fd = os.open(name, NOFOLLOW, dir_fd=dir_fd)
        except FileNotFoundError:
            raise
        except OSError:  # swapped for a link (ELOOP) or a device node (the layer is nodev): never kept
            self.manifest.skipped.append("/" + arc)
            return
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                self.add(self.info(arc, st, tarfile.DIRTYPE))
                if _opaque(fd):
                    self.manifest.opaque_dirs.append("/" + arc)
                self.walk(fd, arc)
            elif stat.S_ISREG(st.st_mode) and self.manifest.size + st.st_size <= self.manifest.limit_bytes:
                self.manifest.size += st.st_size
                with os.fdopen(os.dup(fd), "rb") as data:
                    self.add(self.info(arc, st, tarfile.REGTYPE), _Exactly(data, st.st_size))
            else:  # swapped for something else, or grown past the limit, since it was listed
                self.manifest.cut.append("/" + arc)
        finally:
            os.close(fd)

    def info(self, arc: str, st: os.stat_result, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
        info = tarfile.TarInfo(arc)
        info.type, info.linkname = kind, linkname
        info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)
        info.size = st.st_size if kind == tarfile.REGTYPE else 0
        info.uname = info.gname = "root"
        if st.st_uid == self.agent_uid:
            self.manifest.agent_owned.append("/" + arc)
        return info

    def add(self, info: tarfile.TarInfo, data: _Exactly | None = None) -> None:
        self.manifest.entries += 1
        self.tar.addfile(info, data)  # type: ignore[arg-type,unused-ignore]  # read() is all it needs


def pack_upper(upper: Path, archive: Path, manifest: KeptState, *, agent_uid: int) -> KeptState:
    """Pack the upper layer `upper` into the gzip tar `archive` (written to a temp name, then renamed),
    filling `manifest` (deletions, opaque dirs, agent-owned paths, what was cut or skipped)."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(f".{archive.name}.tmp")
    root = os.open(upper, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=1, format=tarfile.PAX_FORMAT) as tar:
            _Packer(tar, manifest, agent_uid).walk(root, "")
        os.replace(tmp, archive)
    finally:
        os.close(root)
        tmp.unlink(missing_ok=True)
    return manifest
