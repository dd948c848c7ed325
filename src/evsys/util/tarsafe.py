"""Extracting tars that came out of a sandbox: tarfile's "tar" filter, plus no link that points outside."""

from __future__ import annotations

import tarfile


def links_stay_inside(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """A tarfile extraction filter: the "tar" filter (no absolute names, nothing outside `dest`, no setuid
    bits), and symlinks or hard links to an absolute path or outside `dest` are skipped (None) instead of
    being created: the "tar" filter alone would create a host symlink to, say, /etc/passwd."""
    if member.issym() or member.islnk():
        try:
            tarfile.data_filter(member, dest)
        except tarfile.FilterError:
            return None
    return tarfile.tar_filter(member, dest)
