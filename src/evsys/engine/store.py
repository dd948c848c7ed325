"""`JobStore`: the job directory on disk, written atomically and read back for resume.

```
<jobs_dir>/<job>/config.json           JobConfig
<jobs_dir>/<job>/result.json           JobResult (rewritten as trials finish)
<jobs_dir>/<job>/<trial>/config.json   TrialConfig
<jobs_dir>/<job>/<trial>/result.json   TrialResult
<jobs_dir>/<job>/<trial>/trajectory.json
<jobs_dir>/<job>/<trial>/agent/  verifier/  artifacts/
```
Every JSON file goes through `evsys.util.atomic` (temp file + fsync + rename): a crash never leaves a
truncated file. Blocking file work runs in a thread so the event loop never stalls. A trial writes its files
through the store it is given (`write_trial_file` for anything beyond config, result and trajectory); a trial
run in another process comes back as a tar that `import_trial` unpacks (links kept inside the trial dir), its
result.json written last.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
import tarfile
from pathlib import Path

from pydantic import BaseModel, ValidationError

from evsys.engine.config import RESUME_SAFE_FIELDS, JobConfig, TrialConfig
from evsys.records import FailureCause, JobResult, Trajectory, TrialResult
from evsys.util.atomic import write_bytes_atomic, write_json_atomic, write_text_atomic
from evsys.util.descriptors import raise_descriptor_limit
from evsys.util.tarsafe import links_stay_inside

CONFIG = "config.json"
RESULT = "result.json"
TRAJECTORY = "trajectory.json"
TRIAL_SUBDIRS = ("agent", "verifier", "artifacts")


class JobStoreError(ValueError):
    """The job directory cannot be used (missing or unreadable config, name clash)."""


class JobStore:
    """Reads and writes one job directory."""

    def __init__(self, job_dir: Path, *, durable: bool = True, keep_trajectories: bool = False) -> None:
        self.job_dir = Path(job_dir)
        self.durable = durable  # False: no fsync (a worker's scratch directory, which the driver re-writes)
        # as many descriptors as the host allows: servers a sandbox can reach keep a reserve of them free
        # (evsys.util.descriptors), so one trial's connections never stop another's result being written
        raise_descriptor_limit()
        # with keep_trajectories, each trial's trajectory as last written or imported (run_rollouts hands
        # them back without reading the files again)
        self.trajectories: dict[str, Trajectory] | None = {} if keep_trajectories else None

    @property
    def config_path(self) -> Path:
        """The job's config.json."""
        return self.job_dir / CONFIG

    def exists(self) -> bool:
        """True when the job directory already holds a config.json."""
        return self.config_path.is_file()

    def trial_dir(self, trial_name: str) -> Path:
        """The directory of one trial."""
        return self.job_dir / trial_name

    def read_config(self) -> JobConfig:
        """The saved JobConfig; `JobStoreError` naming the file when missing or invalid."""
        return read_job_config(self.job_dir)

    def check_resumable(self, config: JobConfig) -> bool:
        """Refuse (JobStoreError) resuming with a config that differs from the saved one beyond the fields a
        resume may change (and where the job directory is: it may have been moved); True when some of those
        changed, so config.json must be saved again."""
        saved = self.read_config()
        same = {"jobs_dir", "job_name", *RESUME_SAFE_FIELDS}
        if saved.model_dump(mode="json", exclude=same) != config.model_dump(mode="json", exclude=same):
            raise JobStoreError(f"{self.config_path} differs from this job's config: cannot resume")
        safe = set(RESUME_SAFE_FIELDS)
        return saved.model_dump(include=safe) != config.model_dump(include=safe)

    async def write_config(self, config: JobConfig) -> None:
        """Save the JobConfig as config.json."""
        await _write(self.config_path, config, fsync=self.durable)

    async def write_job_result(self, result: JobResult) -> None:
        """Save the job's result.json."""
        await _write(self.job_dir / RESULT, result, fsync=self.durable)

    def recorded_start(self, results: dict[str, TrialResult]) -> str | None:
        """When an earlier run of this job started: its result.json's `started_at`, else (a run killed before
        its first result.json) the earliest start of `results`; None when neither says."""
        try:
            return JobResult.model_validate_json((self.job_dir / RESULT).read_bytes()).started_at
        except (OSError, ValueError):
            return min((r.started_at for r in results.values() if r.started_at), default=None)

    async def reset_trial_dir(self, trial_name: str) -> Path:
        """Wipe what an earlier (unfinished or retried) run left in the trial dir; return the fresh dir."""
        path = self.trial_dir(trial_name)
        await asyncio.to_thread(_recreate, path)
        return path

    async def start_trial(self, config: TrialConfig) -> Path:
        """`reset_trial_dir`, then the trial's config.json, in one thread hop (what a trial does first); the
        dir."""
        return await asyncio.to_thread(self._start_trial, config)

    def _start_trial(self, config: TrialConfig) -> Path:
        path = self.trial_dir(config.trial_name)
        _recreate(path)
        write_json_atomic(path / CONFIG, config, fsync=False)
        return path

    async def finish_trial(self, trajectory: Trajectory, result: TrialResult) -> None:
        """The trajectory, then the result (last, fsynced: resume trusts it), in one thread hop."""
        await asyncio.to_thread(self._finish_trial, trajectory, result)
        if self.trajectories is not None:
            self.trajectories[result.trial_name] = trajectory

    def _finish_trial(self, trajectory: Trajectory, result: TrialResult) -> None:
        path = self.trial_dir(result.trial_name)
        write_json_atomic(path / TRAJECTORY, trajectory, fsync=False)
        write_json_atomic(path / RESULT, result, fsync=self.durable)

    def trajectory(self, trial_name: str) -> Trajectory | None:
        """A trial's trajectory: the one kept in memory, else its trajectory.json (a trial an earlier run of
        a resumed job finished); None when missing or unreadable."""
        if self.trajectories is not None and trial_name in self.trajectories:
            return self.trajectories[trial_name]
        try:
            return Trajectory.model_validate_json((self.trial_dir(trial_name) / TRAJECTORY).read_bytes())
        except (OSError, ValueError):
            return None

    async def write_trial_file(self, trial_name: str, relpath: str, content: str | bytes | object) -> None:
        """Save one file of a trial (e.g. `verifier/reward.json`): text, bytes, or JSON for anything else."""
        path = self._inside_trial(trial_name, relpath)
        if isinstance(content, str):
            await asyncio.to_thread(write_text_atomic, path, content, fsync=False)
        elif isinstance(content, bytes):
            await asyncio.to_thread(write_bytes_atomic, path, content, fsync=False)
        else:
            await asyncio.to_thread(write_json_atomic, path, content, fsync=False)

    def _inside_trial(self, trial_name: str, relpath: str) -> Path:
        base = self.trial_dir(trial_name).resolve()
        path = (base / relpath).resolve()
        if not path.is_relative_to(base) or path == base:
            raise JobStoreError(f"{relpath!r} is not a file inside trial {trial_name!r}")
        return path

    async def import_trial(self, trial_name: str, files: bytes, result: TrialResult) -> None:
        """Take over a trial run elsewhere: its files (a tar of the worker's trial directory, extracted with
        links kept inside) replace the trial dir, then its result.json is written — last, fsynced."""
        await asyncio.to_thread(self._import_trial, self.trial_dir(trial_name), files, result)

    def _import_trial(self, path: Path, files: bytes, result: TrialResult) -> None:
        """`import_trial` in one thread hop: recreate, extract, then the result (atomic, fsynced)."""
        _recreate(path)
        trajectory = _extract_trial_tar(files, path, keep_trajectory=self.trajectories is not None)
        if self.trajectories is not None and trajectory is not None:
            self.trajectories[result.trial_name] = trajectory
        write_json_atomic(path / RESULT, result, fsync=self.durable)

    def read_trial_result(self, trial_name: str) -> TrialResult | None:
        """A trial's result when its result.json exists and parses, else None."""
        path = self.trial_dir(trial_name) / RESULT
        try:
            return TrialResult.model_validate_json(path.read_bytes())
        except (OSError, ValidationError, ValueError):
            return None

    def remove_stale_temp_files(self, trial_names: list[str]) -> int:
        """Delete the temp files of atomic writes a killed run left in the job dir and the kept trial dirs
        (`.<name>.<random>.tmp`; the files themselves were never replaced); return how many."""
        removed = 0
        for directory in (self.job_dir, *(self.trial_dir(n) for n in trial_names)):
            for path in directory.glob(".*.tmp"):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    removed += 1
        return removed

    def finished_results(
        self, trial_names: list[str], *, retry_errors: bool = False
    ) -> dict[str, TrialResult]:
        """Trials a resume may skip: valid result.json, not cancelled (nor failed, with retry_errors)."""
        done: dict[str, TrialResult] = {}
        for name in trial_names:
            result = self.read_trial_result(name)
            if result is None or result.cause == FailureCause.CANCELLED:
                continue
            if retry_errors and result.failure is not None:
                continue
            done[name] = result
        return done


def read_job_config(job_dir: Path) -> JobConfig:
    """Read `<job_dir>/config.json`; `JobStoreError` naming file and field when missing or invalid."""
    path = Path(job_dir) / CONFIG
    if not path.is_file():
        raise JobStoreError(f"{path} does not exist: is '{job_dir}' a job directory?")
    try:
        return JobConfig.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise JobStoreError(f"{path}:{where}: {first['msg']}") from None


def _extract_trial_tar(files: bytes, path: Path, *, keep_trajectory: bool = False) -> Trajectory | None:
    """Extract a packed trial into `path` (all but its result.json); with `keep_trajectory`, its trajectory
    parsed from the tar as well (None when it has none that parses)."""
    with tarfile.open(fileobj=io.BytesIO(files), mode="r:") as tar:
        members = [m for m in tar.getmembers() if m.name not in (".", RESULT, f"./{RESULT}")]
        tar.extractall(path, members=members, filter=links_stay_inside)
        if not keep_trajectory:
            return None
        member = next((m for m in members if m.name in (TRAJECTORY, f"./{TRAJECTORY}") and m.isfile()), None)
        data = tar.extractfile(member) if member is not None else None
        try:
            return Trajectory.model_validate_json(data.read()) if data is not None else None
        except ValueError:
            return None


def _recreate(path: Path) -> None:
    """An empty trial dir with its subdirectories (whatever an earlier run left there is removed)."""
    try:
        os.mkdir(path)
    except FileExistsError:
        shutil.rmtree(path)
        os.mkdir(path)
    except FileNotFoundError:
        path.mkdir(parents=True)
    for name in TRIAL_SUBDIRS:
        os.mkdir(os.path.join(path, name))


async def _write(path: Path, obj: BaseModel, *, fsync: bool = True) -> None:
    """Atomic write off the event loop. Only the files resume trusts (results, job config) are fsynced;
    the rest are still all-or-nothing through the rename, which is what a killed process needs."""
    await asyncio.to_thread(write_json_atomic, path, obj, fsync=fsync)
