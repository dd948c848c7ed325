"""`--keep-state` reads a sandbox's upper layer while what the agent left running may still change it, through
a host path on which an absolute symlink would resolve to the host's files. An entry listed as a regular file
(or a directory) and swapped for a link to a host secret before it is opened must never bring the secret into
the kept state."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

from evsys.records.state import KeptState
from evsys.sandbox.local.upper import _Packer


def _pack_swapped(tmp_path: Path, target: Path) -> tuple[bytes, KeptState]:
    """Pack `upper/a` as the walk does once it has listed `a` as a regular file or directory, after the
    agent swapped `a` for a symlink to `target`; the archive's bytes and the manifest."""
    upper = tmp_path / "upper"
    upper.mkdir()
    (upper / "a").symlink_to(target)  # the state the race leaves: listed as a file, now a link
    manifest = KeptState(backend="local", limit_bytes=1 << 20)
    archive = tmp_path / "state.tar"
    fd = os.open(upper, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with tarfile.open(archive, "w") as tar:
            _Packer(tar, manifest, agent_uid=12345).opened(fd, "a", "a")
    finally:
        os.close(fd)
    return archive.read_bytes(), manifest


def test_a_file_swapped_for_a_link_to_a_host_secret_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("HOST-SECRET-7f3a\n")
    data, manifest = _pack_swapped(tmp_path, secret)
    # positive control: the swapped entry opened the plain way (open(path)) yields the host's secret
    assert "HOST-SECRET-7f3a" in (tmp_path / "upper" / "a").read_text()
    assert b"HOST-SECRET-7f3a" not in data
    assert manifest.skipped == ["/a"] and manifest.entries == 0


def test_a_directory_swapped_for_a_link_to_a_host_directory_is_not_walked(tmp_path: Path) -> None:
    host_dir = tmp_path / "host-etc"
    host_dir.mkdir()
    (host_dir / "shadow").write_text("root:HOST-HASH-91c2:19000\n")
    data, manifest = _pack_swapped(tmp_path, host_dir)
    assert (tmp_path / "upper" / "a" / "shadow").is_file()  # positive control: a plain walk reaches it
    assert b"HOST-HASH-91c2" not in data and b"shadow" not in data
    assert manifest.skipped == ["/a"]
