"""Copying a trial's `/logs` out of the sandbox into its trial dir (`agent/`, `verifier/`, `artifacts/`)."""

from __future__ import annotations

import io
import os
import posixpath
import shutil
import tarfile
from pathlib import Path

LOG_SUBDIRS = ("agent", "verifier", "artifacts")


def extract_logs(data: bytes, trial_dir: Path) -> list[str]:
    """Extract a tar of `/logs` (members named `logs/...`) straight into the trial dir, with no staging copy.

    Only members under logs/agent, logs/verifier and logs/artifacts are taken (renamed without `logs/`), so
    nothing from the sandbox can replace the trial's own config.json, result.json or trajectory.json. Names
    with `..` are refused; symlinks are kept only when they point inside their own log directory, and nothing
    is ever written through one; hard links, devices and FIFOs are skipped. Returns a warning for each member
    that was not placed. (Done by hand: tarfile's filters resolve every path with realpath, which cost more
    CPU than the rest of a trial's bookkeeping.)"""
    warnings: list[str] = []
    links: set[str] = set()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            name = _log_name(member.name)
            if name is None:
                continue
            problem = _place(tar, member, name, trial_dir, links)
            if problem:
                warnings.append(f"log entry {name} was not copied: {problem}")
    for sub in LOG_SUBDIRS:
        (trial_dir / sub).mkdir(exist_ok=True)
    return warnings


def _log_name(member_name: str) -> str | None:
    """`logs/agent/x` -> `agent/x`; None for anything outside the three log dirs."""
    parts = [p for p in member_name.split("/") if p not in ("", ".")]
    if len(parts) < 2 or parts[0] != "logs" or parts[1] not in LOG_SUBDIRS:
        return None
    return "/".join(parts[1:])


def _place(tar: tarfile.TarFile, member: tarfile.TarInfo, name: str, trial_dir: Path, links: set) -> str:
    """Create one member under trial_dir; an explanation when it is refused or fails, else ""."""
    parts = name.split("/")
    if ".." in parts:
        return "its name climbs out with '..'"
    if any("/".join(parts[:i]) in links for i in range(1, len(parts) + 1)):
        return "it would be written through a symlink"
    target = os.path.join(trial_dir, name)
    try:
        if member.isdir():
            os.makedirs(target, exist_ok=True)
        elif member.isfile():
            os.makedirs(os.path.dirname(target), exist_ok=True)
            _write_file(target, tar.extractfile(member).read(), member)
        elif member.issym():
            inside = posixpath.normpath(posixpath.join(posixpath.dirname(name), member.linkname))
            if member.linkname.startswith("/") or inside.split("/")[0] in ("..", "") or inside == ".":
                return f"a link to {member.linkname!r} would point outside the trial dir"
            if inside.split("/")[0] != parts[0]:
                return f"a link to {member.linkname!r} leaves its log directory"
            os.makedirs(os.path.dirname(target), exist_ok=True)
            _remove(target)
            os.symlink(member.linkname, target)
            links.add(name)
        else:
            return "not a regular file, directory or symlink"
    except OSError as exc:
        return str(exc)
    return ""


def _write_file(target: str, data: bytes, member: tarfile.TarInfo) -> None:
    _remove(target)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, (member.mode & 0o777) | 0o600)
    finally:
        os.close(fd)
    os.utime(target, (member.mtime, member.mtime), follow_symlinks=False)


def _remove(target: str) -> None:
    """Make room for a new entry: a previous file or link of that name goes (a directory stays)."""
    if os.path.islink(target) or os.path.isfile(target):
        os.unlink(target)


def place_logs(staging: Path, trial_dir: Path) -> None:
    """Move agent/, verifier/ and artifacts/ from a copy of /logs into the trial dir (merging into agent/)."""
    for name in LOG_SUBDIRS:
        src, dst = staging / name, trial_dir / name
        dst.mkdir(exist_ok=True)
        if not src.is_dir() or src.is_symlink():
            continue
        for entry in src.iterdir():
            target = dst / entry.name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            entry.rename(target)
    shutil.rmtree(staging, ignore_errors=True)
