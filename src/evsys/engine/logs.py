"""Copying a trial's `/logs` out of the sandbox into its trial dir (`agent/`, `verifier/`, `artifacts/`)."""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
from pathlib import Path
from typing import Protocol

from evsys.records import CopyOutLimits
from evsys.sandbox.base import Sandbox
from evsys.util.text import safe_text

LOG_SUBDIRS = ("agent", "verifier", "artifacts")
# packed before everything else, so the reward wins the space when /logs is over a bound
FIRST = ("verifier/reward.json", "verifier/reward.txt", "verifier")
MAX_LINK_HOPS = 40
MAX_CUT_NAMED = 20


class Readable(Protocol):
    """A byte stream read front to back (a file object, or the copy-out's chunk reader)."""

    def read(self, size: int = -1, /) -> bytes:
        """Up to `size` bytes (all that is left when negative)."""
        ...


async def copy_logs_out(sandbox: Sandbox, logs_dir: str, trial_dir: Path, limits: CopyOutLimits) -> list[str]:
    """Copy the sandbox's `/logs` into the trial dir within `limits` (`sandbox.copy_out`, the bounds enforced
    inside the sandbox); the warnings name what was cut or not placed."""
    tree = await sandbox.copy_out(logs_dir, limits, first=FIRST)
    warnings = [safe_text(f"/logs was over a copy-out bound; cut: {line}") for line in tree.cut]
    if tree.cut_count > len(tree.cut):
        warnings.append(f"/logs copy-out: {tree.cut_count - len(tree.cut)} more entries were cut")
    return warnings + await asyncio.to_thread(extract_logs, tree.reader(), trial_dir)


def extract_logs(data: bytes | Readable, trial_dir: Path) -> list[str]:
    """Extract a tar of `/logs` (members named `logs/...`) straight into the trial dir, with no staging copy;
    `data` is the tar or a file object read once, front to back.

    Only members under logs/agent, logs/verifier and logs/artifacts are taken (renamed without `logs/`), so
    nothing from the sandbox can replace the trial's own config.json, result.json or trajectory.json. Names
    with `..` are refused; nothing is ever written through a symlink (links are made last, and nothing goes
    under a link's name); a symlink is kept only when its target, resolved through every other link of the
    tar (chains like `l1 -> l0/..`), stays inside its own log directory; hard links, devices and FIFOs are
    skipped. Returns a warning (safe text) for each member that was not placed. (Done by hand: tarfile's
    filters resolve every path with realpath, which cost more CPU than the rest of a trial's bookkeeping.)"""
    fileobj = io.BytesIO(data) if isinstance(data, bytes | bytearray) else data
    warnings: list[str] = []
    links: dict[str, str] = {}
    made: set[str] = set()  # directories known to exist (each made or checked once)
    try:
        # stream mode ("r|") only ever reads; typeshed asks any file object for write/seek/tell as well
        with tarfile.open(fileobj=fileobj, mode="r|") as tar:  # type: ignore[call-overload]
            for member in tar:
                name = _log_name(member.name)
                if name is None:
                    continue
                problem = _place(tar, member, name, trial_dir, links, made)
                if problem:
                    warnings.append(safe_text(f"log entry {name} was not copied: {problem}"))
    except tarfile.TarError as exc:  # what came before the damage is kept
        warnings.append(safe_text(f"the copy of /logs is damaged; the rest was not copied: {exc}"))
    for name, target in links.items():
        problem = _make_link(name, target, trial_dir, links)
        if problem:
            warnings.append(safe_text(f"log entry {name} was not copied: {problem}"))
    for sub in LOG_SUBDIRS:
        _make_dir(os.path.join(trial_dir, sub), made)
    return warnings


def _log_name(member_name: str) -> str | None:
    """`logs/agent/x` -> `agent/x`; None for anything outside the three log dirs."""
    parts = [p for p in member_name.split("/") if p not in ("", ".")]
    if len(parts) < 2 or parts[0] != "logs" or parts[1] not in LOG_SUBDIRS:
        return None
    return "/".join(parts[1:])


def _place(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    name: str,
    trial_dir: Path,
    links: dict[str, str],
    made: set[str],
) -> str:
    """Create one member under trial_dir (a symlink is only noted, in `links`; directories made are noted in
    `made`); an explanation when it is refused or fails, else ""."""
    parts = name.split("/")
    if ".." in parts:
        return "its name climbs out with '..'"
    if any("/".join(parts[:i]) in links for i in range(1, len(parts) + 1)):
        return "it would be written through a symlink"
    target = os.path.join(trial_dir, name)
    try:
        if member.isdir():
            _make_dir(target, made)
        elif member.isfile():
            _make_dir(os.path.dirname(target), made)
            source = tar.extractfile(member)
            if source is None:  # a regular file always has its data; never reached
                return "its data could not be read"
            _write_file(target, source, member)
        elif member.issym():
            links[name] = member.linkname
        else:
            return "not a regular file, directory or symlink"
    except OSError as exc:
        return str(exc)
    return ""


def _make_link(name: str, linkname: str, trial_dir: Path, links: dict[str, str]) -> str:
    """Create the symlink `name` -> `linkname` when it resolves inside its log directory; else why not."""
    if not _resolves_inside(name, links):
        return f"a link to {linkname!r} resolves outside its log directory"
    target = os.path.join(trial_dir, name)
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        _remove(target)
        os.symlink(linkname, target)
    except OSError as exc:
        return str(exc)
    return ""


def _resolves_inside(name: str, links: dict[str, str]) -> bool:
    """Whether the link `name` (e.g. `agent/l2`) resolves, following every link of the copy (each hop
    relative to its own directory), to a path inside its log directory (`agent`). Nothing on the host is
    consulted: the copied tree holds only what the tar made, and these are all its links."""
    cur = name.split("/")[:-1]
    pending = links[name].split("/")
    if links[name].startswith("/"):
        return False
    hops = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if len(cur) <= 1:
                return False
            cur.pop()
            continue
        here = "/".join([*cur, part])
        if here in links:
            hops += 1
            if hops > MAX_LINK_HOPS or links[here].startswith("/"):
                return False
            pending = links[here].split("/") + pending
            continue
        cur.append(part)
    return bool(cur)


def _make_dir(path: str, made: set[str]) -> None:
    """`os.makedirs(path, exist_ok=True)`, once per path per extraction."""
    if path not in made:
        os.makedirs(path, exist_ok=True)
        made.add(path)


def _write_file(target: str, source: Readable, member: tarfile.TarInfo) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(target, flags, 0o600)
    except FileExistsError:  # an earlier entry of that name (a tar may repeat one): the last one wins
        _remove(target)
        fd = os.open(target, flags, 0o600)
    try:
        while chunk := source.read(1 << 20):
            view = memoryview(chunk)
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
