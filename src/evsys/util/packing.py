"""Packing a host directory as a tar for a sandbox (a task's tests/, a solution), cached until it changes."""

from __future__ import annotations

import io
import os
import tarfile
from functools import lru_cache
from pathlib import Path

Fingerprint = tuple[tuple[str, int, int, int], ...]  # (relative path, mtime ns, size, mode) of each entry


def _fingerprint(path: Path) -> Fingerprint:
    entries = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files) + dirs:
            st = os.lstat(os.path.join(root, name))
            entries.append(
                (os.path.relpath(os.path.join(root, name), path), st.st_mtime_ns, st.st_size, st.st_mode)
            )
    return tuple(entries)


@lru_cache(maxsize=256)
def _pack(path: str, fingerprint: Fingerprint) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(path, arcname=".", recursive=True)
    return buf.getvalue()


def pack_directory(path: Path) -> bytes:
    """An uncompressed tar of a host directory's contents, cached until a file in it changes."""
    path = Path(path).resolve()
    return _pack(str(path), _fingerprint(path))
