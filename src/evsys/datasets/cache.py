"""Datasets fetched by name: each task's pinned commit from its git repository, into a local directory.

`DatasetCache.download(dataset)` mirrors each task's repository once (evsys.repo's repository cache: one bare
mirror per repository, fetched under a lock), checks that the pinned commit is in it, and writes the task's
directory at that commit (`git archive` of its path, extracted with links kept inside) to
`$EVSYS_CACHE_DIR/datasets/<name>@<version>/<task>`. The directory is assembled aside and renamed into place
with a record of what was fetched (`.evsys-dataset.json`: every task's repository, full commit and path), so a
killed download leaves nothing half-written. A dataset whose record matches the registry's pins is used as it
is: no git, no network.
"""

from __future__ import annotations

import asyncio
import fcntl
import io
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ValidationError

from evsys.datasets.registry import RegistryDataset, RegistryError, RegistryTask
from evsys.repo.cache import RepoCache, RepoCacheError, git
from evsys.util.atomic import write_json_atomic
from evsys.util.tarsafe import links_stay_inside

RECORD = ".evsys-dataset.json"
OnTask = Callable[[RegistryTask, int, int], None]


class FetchedTask(BaseModel):
    """What was fetched for one task: its repository, the full commit and the path inside it."""

    name: str
    git_url: str | None
    commit: str | None
    path: str
    pinned: bool


class DatasetRecord(BaseModel):
    """The record written beside a fetched dataset's task directories."""

    name: str
    version: str
    registry: str
    fetched_at: datetime
    tasks: list[FetchedTask]


def cache_root() -> Path:
    """`$EVSYS_CACHE_DIR/datasets` (default `~/.cache/evsys/datasets`)."""
    base = os.environ.get("EVSYS_CACHE_DIR") or str(Path.home() / ".cache" / "evsys")
    return Path(base) / "datasets"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "-", text).strip("-.") or "dataset"


def _matches(record: DatasetRecord, dataset: RegistryDataset) -> bool:
    """True when the record fetched exactly the tasks, repositories, paths and pinned commits listed."""
    if len(record.tasks) != len(dataset.tasks):
        return False
    for done, wanted in zip(record.tasks, dataset.tasks, strict=True):
        if (done.name, done.git_url, done.path) != (wanted.name, wanted.git_url, wanted.path):
            return False
        pin = wanted.git_commit_id
        if pin and not (done.commit or "").startswith(pin):
            return False
    return True


class DatasetCache:
    """Local copies of registry datasets (see the module docstring)."""

    def __init__(self, root: Path | None = None, repos: RepoCache | None = None) -> None:
        self.root = Path(root) if root is not None else cache_root()
        self.repos = repos or RepoCache()

    def path_for(self, dataset: RegistryDataset) -> Path:
        """Where `dataset` lives once fetched."""
        return self.root / f"{_safe(dataset.name)}@{_safe(dataset.version)}"

    def record(self, dataset: RegistryDataset) -> DatasetRecord | None:
        """The record of a fetched copy of `dataset` (None when there is none or it is unreadable)."""
        try:
            return DatasetRecord.model_validate_json((self.path_for(dataset) / RECORD).read_bytes())
        except (OSError, ValidationError):
            return None

    def cached(self, dataset: RegistryDataset) -> Path | None:
        """The local directory of `dataset` when a fetched copy matches the registry's pins, else None."""
        record = self.record(dataset)
        return self.path_for(dataset) if record is not None and _matches(record, dataset) else None

    async def download(
        self,
        dataset: RegistryDataset,
        *,
        registry: str,
        base: Path | None = None,
        force: bool = False,
        on_task: OnTask | None = None,
    ) -> Path:
        """The local directory of `dataset`, fetched unless a matching copy is cached (or `force`). `base`
        resolves relative local task paths (those without a git_url); `on_task` hears each task starting."""
        if not force and (hit := self.cached(dataset)) is not None:
            return hit
        return await asyncio.to_thread(self._download_locked, dataset, registry, base, force, on_task)

    def _download_locked(
        self, dataset: RegistryDataset, registry: str, base: Path | None, force: bool, on_task: OnTask | None
    ) -> Path:
        final = self.path_for(dataset)
        final.parent.mkdir(parents=True, exist_ok=True)
        with open(f"{final}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not force and (hit := self.cached(dataset)) is not None:
                return hit  # another process fetched it while this one waited
            staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
            try:
                fetched = [
                    self._fetch_task(task, staging, base, index, len(dataset.tasks), on_task)
                    for index, task in enumerate(dataset.tasks)
                ]
                record = DatasetRecord(
                    name=dataset.name,
                    version=dataset.version,
                    registry=registry,
                    fetched_at=datetime.now(UTC),
                    tasks=fetched,
                )
                write_json_atomic(staging / RECORD, record.model_dump(mode="json"))
                self._replace(staging, final)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        return final

    @staticmethod
    def _replace(staging: Path, final: Path) -> None:
        if final.exists():
            old = final.with_name(f".{final.name}.old.{os.getpid()}")
            os.replace(final, old)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(staging, final)

    def _fetch_task(
        self,
        task: RegistryTask,
        staging: Path,
        base: Path | None,
        index: int,
        total: int,
        on_task: OnTask | None,
    ) -> FetchedTask:
        if on_task is not None:
            on_task(task, index, total)
        dest = staging / task.name
        if dest.exists():
            raise RegistryError(f"task name {task.name!r} is listed twice")
        if task.git_url is None:
            return self._copy_local(task, dest, base)
        try:
            commit = self._resolve_commit(task)
            self._extract(task, commit, dest)
        except RepoCacheError as exc:
            raise RegistryError(f"task {task.name}: {exc}") from None
        return FetchedTask(
            name=task.name,
            git_url=task.git_url,
            commit=commit,
            path=task.path,
            pinned=task.git_commit_id is not None,
        )

    def _resolve_commit(self, task: RegistryTask) -> str:
        """The full commit the task is pinned to, checked to be in the repository (HEAD when unpinned)."""
        assert task.git_url is not None
        mirror = self.repos.ensure(task.git_url, task.git_commit_id)
        wanted = task.git_commit_id or "HEAD"
        done = git("rev-parse", "--verify", "--quiet", f"{wanted}^{{commit}}", cwd=mirror, check=False)
        commit = done.stdout.strip()
        if done.returncode != 0 or not commit.startswith(task.git_commit_id or ""):
            raise RegistryError(f"task {task.name}: commit {wanted} is not in {task.git_url}")
        return commit

    def _extract(self, task: RegistryTask, commit: str, dest: Path) -> None:
        assert task.git_url is not None
        path = task.path.strip("/") or "."
        data = self.repos.archive(task.git_url, commit, paths=[path])
        unpacked = dest.with_name(f".{dest.name}.tar")
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            tar.extractall(unpacked, filter=links_stay_inside)
        source = unpacked / path
        if not source.is_dir():
            raise RegistryError(
                f"task {task.name}: {path} is not a directory at {commit[:12]} of {task.git_url}"
            )
        os.replace(source, dest)
        shutil.rmtree(unpacked, ignore_errors=True)

    @staticmethod
    def _copy_local(task: RegistryTask, dest: Path, base: Path | None) -> FetchedTask:
        source = Path(task.path).expanduser()
        source = source if source.is_absolute() or base is None else base / source
        if not source.is_dir():
            raise RegistryError(f"task {task.name}: local path {source} is not a directory")
        shutil.copytree(source, dest, symlinks=True)
        return FetchedTask(name=task.name, git_url=None, commit=None, path=str(source), pinned=False)
