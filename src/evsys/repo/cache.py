"""The repository cache: one bare mirror per repository, and cheap per-trial checkouts from it.

Mirrors live under `$EVSYS_CACHE_DIR/repos/mirrors/<name>-<hash>.git` (a URL or a local path is the key).
Creating or updating a mirror holds an exclusive `fcntl` lock on `<mirror>.lock`, so concurrent trials and
processes fetch once; a commit already in the mirror needs no lock and no network. A checkout is `git clone
--shared --no-checkout` (the mirror's objects are borrowed through `objects/info/alternates`, nothing is
copied) followed by a detached checkout of the commit: milliseconds for a small repository, independent of
every other checkout of the same mirror. A trial needs no host checkout at all: `archive` streams the tree at
the commit from the mirror's objects as a tar (~30 ms for 400 files) that the sandbox extracts.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

_GIT_ENV = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "evsys",
    "GIT_AUTHOR_EMAIL": "evsys@localhost",
    "GIT_COMMITTER_NAME": "evsys",
    "GIT_COMMITTER_EMAIL": "evsys@localhost",
}
_LOCAL_LOCKS: dict[str, threading.Lock] = {}
# a mirror's info/attributes (which wins over the tree's .gitattributes): `git archive` keeps every file as
# committed, as a checkout would (no export-ignore'd test directories, no $Format$ substitution)
ARCHIVE_ATTRIBUTES = "* -export-ignore -export-subst\n"


class RepoCacheError(RuntimeError):
    """A repository cannot be mirrored, or a commit is not in it."""


def cache_root() -> Path:
    """`$EVSYS_CACHE_DIR/repos` (default `~/.cache/evsys/repos`)."""
    base = os.environ.get("EVSYS_CACHE_DIR") or str(Path.home() / ".cache" / "evsys")
    return Path(base) / "repos"


def git(*args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run host git with a fixed identity and no prompts; RepoCacheError with its stderr on failure."""
    env = {**os.environ, **_GIT_ENV}
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()[-800:]
        raise RepoCacheError(f"git {' '.join(args[:3])} failed: {detail}")
    return proc


def _source_key(source: str) -> str:
    if "://" not in source and not source.startswith("git@"):
        source = str(Path(source).expanduser().resolve())
    return source


class RepoCache:
    """Bare mirrors of repositories and checkouts from them (see the module docstring)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else cache_root()

    def mirror_path(self, source: str) -> Path:
        """Where the mirror of `source` lives (it may not exist yet)."""
        key = _source_key(source)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", key.rstrip("/").removesuffix(".git").rsplit("/", 1)[-1])
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        return self.root / "mirrors" / f"{name[:40]}-{digest}.git"

    def _has_commit(self, mirror: Path, commit: str) -> bool:
        if not (mirror / "HEAD").is_file():
            return False
        return git("cat-file", "-e", f"{commit}^{{commit}}", cwd=mirror, check=False).returncode == 0

    @contextmanager
    def _locked(self, mirror: Path) -> Iterator[None]:
        mirror.parent.mkdir(parents=True, exist_ok=True)
        local = _LOCAL_LOCKS.setdefault(str(mirror), threading.Lock())
        with local, open(f"{mirror}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def ensure(self, source: str, commit: str | None = None) -> Path:
        """The mirror of `source`, created or fetched (under the lock) unless it already has `commit`."""
        mirror = self.mirror_path(source)
        if commit is not None and self._has_commit(mirror, commit):
            return mirror
        with self._locked(mirror):
            if commit is not None and self._has_commit(mirror, commit):
                return mirror
            if not (mirror / "HEAD").is_file():
                self._clone_mirror(source, mirror)
            else:
                git("fetch", "--prune", "--quiet", "origin", "+refs/*:refs/*", cwd=mirror)
            if commit is not None and not self._has_commit(mirror, commit):
                raise RepoCacheError(f"commit {commit} is not in {source} (fetched into {mirror})")
        return mirror

    def _clone_mirror(self, source: str, mirror: Path) -> None:
        tmp = Path(tempfile.mkdtemp(prefix=f".{mirror.name}.", dir=mirror.parent))
        try:
            git("clone", "--mirror", "--quiet", _source_key(source), str(tmp / "m.git"))
            (tmp / "m.git" / "info").mkdir(exist_ok=True)
            (tmp / "m.git" / "info" / "attributes").write_text(ARCHIVE_ATTRIBUTES)
            os.replace(tmp / "m.git", mirror)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def checkout(self, source: str, commit: str, dest: Path) -> Path:
        """A working tree of `source` at `commit` in `dest` (which must not exist), borrowing the mirror's
        objects. Remove it with `remove_checkout` (or by deleting the directory)."""
        mirror = self.ensure(source, commit)
        dest = Path(dest)
        git("clone", "--shared", "--no-checkout", "--quiet", str(mirror), str(dest))
        git("-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", commit, cwd=dest)
        return dest

    @contextmanager
    def checked_out(self, source: str, commit: str, parent: Path | None = None) -> Iterator[Path]:
        """A temporary checkout (see `checkout`), removed when the block ends."""
        base = Path(tempfile.mkdtemp(prefix="evsys-checkout-", dir=parent))
        try:
            yield self.checkout(source, commit, base / "tree")
        finally:
            remove_checkout(base)

    def archive(self, source: str, commit: str, paths: Sequence[str] = ()) -> bytes:
        """A tar of the tree at `commit` (no `.git`) straight from the mirror's objects: what a checkout
        holds, without writing it anywhere (a trial extracts it inside its sandbox); just `paths` if given."""
        mirror = self.ensure(source, commit)
        attributes = mirror / "info" / "attributes"
        if not attributes.is_file() or attributes.read_text() != ARCHIVE_ATTRIBUTES:  # a mirror made before
            attributes.parent.mkdir(exist_ok=True)
            tmp = attributes.with_name(f".attributes.{os.getpid()}.{threading.get_ident()}")
            tmp.write_text(ARCHIVE_ATTRIBUTES)
            os.replace(tmp, attributes)
        env = {**os.environ, **_GIT_ENV}
        proc = subprocess.run(
            ["git", "archive", "--format=tar", commit, "--", *paths],
            cwd=mirror,
            env=env,
            capture_output=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RepoCacheError(
                f"git archive {commit} failed: {proc.stderr.decode(errors='replace')[-500:]}"
            )
        return proc.stdout


def remove_checkout(path: Path) -> None:
    """Delete a checkout (its objects are the mirror's, so this touches only its own files)."""
    shutil.rmtree(path, ignore_errors=True)
