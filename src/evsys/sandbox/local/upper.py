"""A local sandbox's overlay upper layer — exactly what was written in its root since it started — packed
into a bounded, compressed tar for `evsys run --keep-state` (evsys.records.state).

Whiteouts (0:0 character devices) become `deletions`, opaque directories (`trusted.overlay.opaque`) become
`opaque_dirs`; other device nodes, fifos and sockets are never packed. Regular files are packed until their
content reaches the byte limit; the rest is listed in `cut`. The daemon's own directory is left out.
"""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path

from evsys.records.state import KeptState

LEFT_OUT = frozenset({".evsys"})
OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")
MAX_ENTRIES = 200_000


def _opaque(path: str) -> bool:
    for name in OPAQUE_XATTRS:
        try:
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False


class _Packer:
    """One walk of an upper layer into an open tar."""

    def __init__(self, tar: tarfile.TarFile, manifest: KeptState, agent_uid: int) -> None:
        self.tar, self.manifest, self.agent_uid = tar, manifest, agent_uid

    def walk(self, directory: str, rel: str) -> None:
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            name = f"{rel}/{entry.name}" if rel else entry.name
            if not rel and entry.name in LEFT_OUT:
                continue
            self.entry(entry.path, name)

    def entry(self, path: str, name: str) -> None:
        st = os.lstat(path)
        shown, manifest = "/" + name, self.manifest
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
            manifest.deletions.append(shown)
            return
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            manifest.skipped.append(shown)
            return
        if manifest.entries >= MAX_ENTRIES or (
            stat.S_ISREG(st.st_mode) and manifest.size + st.st_size > manifest.limit_bytes
        ):
            manifest.cut.append(shown)
            return
        self.add(path, name, st)
        if stat.S_ISDIR(st.st_mode):
            if _opaque(path):
                manifest.opaque_dirs.append(shown)
            self.walk(path, name)

    def add(self, path: str, name: str, st: os.stat_result) -> None:
        info = self.tar.gettarinfo(path, arcname=name)
        if st.st_uid == self.agent_uid:
            self.manifest.agent_owned.append("/" + name)
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        self.manifest.entries += 1
        if info.isreg():
            self.manifest.size += info.size
            with open(path, "rb") as data:
                self.tar.addfile(info, data)
        else:
            self.tar.addfile(info)


def pack_upper(upper: Path, archive: Path, manifest: KeptState, *, agent_uid: int) -> KeptState:
    """Pack the upper layer `upper` into the gzip tar `archive` (written to a temp name, then renamed),
    filling `manifest` (deletions, opaque dirs, agent-owned paths, what was cut or skipped)."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(f".{archive.name}.tmp")
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=6, format=tarfile.PAX_FORMAT) as tar:
            _Packer(tar, manifest, agent_uid).walk(str(upper), "")
        os.replace(tmp, archive)
    finally:
        tmp.unlink(missing_ok=True)
    return manifest
