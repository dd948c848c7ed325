"""`evsys run --keep-state`: each trial's final filesystem kept in `<trial>/state/` at the end of the agent
phase (after an agent timeout too, once its processes are killed), before the verifier runs.

On the local backend that is the overlay's upper layer — exactly what the agent phase wrote — packed by
evsys.sandbox.local.upper: bounded by the job's `keep_state_mb`, compressed, deletions listed in the manifest.
A backend without such a layer (or a sandbox reset since it started) keeps nothing and says so in the
trial's warnings. `load_kept_state`, `kept_members` and `extract_kept` read what was kept
(`evsys trial files`, `evsys rescore`).
"""

from __future__ import annotations

import asyncio
import gzip
import tarfile
from pathlib import Path, PurePosixPath

from evsys.engine.trial.state import TrialState
from evsys.records.state import STATE_ARCHIVE, STATE_DIR, STATE_MANIFEST, KeptState
from evsys.sandbox.local.upper import pack_upper
from evsys.util.atomic import write_json_atomic
from evsys.util.tarsafe import links_stay_inside

MB = 1024 * 1024
CUT_SHOWN = 5  # paths named in the warning about a state cut at its limit


async def keep_state(state: TrialState, trial_dir: Path) -> None:
    """Keep the trial's final filesystem in `trial_dir/state/` when the job asks for it; a warning on the
    trial when it cannot, or when the size limit cut files out."""
    limit_mb = state.config.keep_state_mb
    sandbox = state.live_sandbox
    if limit_mb is None or sandbox is None:
        return
    layer = sandbox.written_layer()
    if layer is None:
        state.result.warnings.append(
            f"--keep-state: not supported on the '{state.spec.sandbox}' backend (or for a sandbox reused "
            "from an earlier trial); this trial's final filesystem was not kept"
        )
        return
    manifest = KeptState(backend=state.spec.sandbox, limit_bytes=limit_mb * MB)
    try:
        await asyncio.to_thread(_keep, layer, trial_dir / STATE_DIR, manifest)
    except OSError as exc:
        state.result.warnings.append(f"--keep-state: keeping the final filesystem failed: {exc}")
        return
    if manifest.cut:
        shown = ", ".join(manifest.cut[:CUT_SHOWN]) + (" ..." if len(manifest.cut) > CUT_SHOWN else "")
        state.result.warnings.append(
            f"--keep-state: the final filesystem exceeds {limit_mb} MB; {len(manifest.cut)} files were "
            f"left out of state/{STATE_ARCHIVE} ({shown}); a rescore sees them missing"
        )


def keep_no_steps(state: TrialState) -> None:
    """A multi-step task keeps no state: say so on the trial when the job asked for it."""
    if state.config.keep_state_mb is not None:
        state.result.warnings.append("--keep-state: multi-step tasks keep no final filesystem")


def _keep(layer: tuple[Path, int], directory: Path, manifest: KeptState) -> None:
    upper, agent_uid = layer
    pack_upper(upper, directory / STATE_ARCHIVE, manifest, agent_uid=agent_uid)
    write_json_atomic(directory / STATE_MANIFEST, manifest, fsync=False)


def load_kept_state(trial_dir: Path) -> KeptState | None:
    """The manifest of a trial's kept state; None when the trial kept none (ValueError when unreadable)."""
    path = trial_dir / STATE_DIR / STATE_MANIFEST
    if not path.is_file():
        return None
    return KeptState.model_validate_json(path.read_bytes())


def kept_archive(trial_dir: Path) -> Path:
    """The archive of a trial's kept state."""
    return trial_dir / STATE_DIR / STATE_ARCHIVE


def kept_members(trial_dir: Path) -> list[tarfile.TarInfo]:
    """Every entry of a trial's kept state, in archive order."""
    with tarfile.open(kept_archive(trial_dir), "r:gz") as tar:
        return tar.getmembers()


def _selected(name: str, path: str) -> bool:
    want = str(PurePosixPath("/", path)).strip("/")
    return not want or name == want or name.startswith(want + "/")


def extract_kept(trial_dir: Path, path: str, dest: Path) -> list[str]:
    """Extract the kept `path` (a file or a directory tree; "/" for everything) under `dest`, at its
    sandbox path; links that would lead outside `dest` are skipped. The names extracted."""
    with tarfile.open(kept_archive(trial_dir), "r:gz") as tar:
        members = [m for m in tar.getmembers() if _selected(m.name, path)]
        tar.extractall(dest, members=members, filter=links_stay_inside)
    return [m.name for m in members]


def read_kept_file(trial_dir: Path, path: str) -> bytes | None:
    """The content of one kept regular file; None when the state holds no such file."""
    name = str(PurePosixPath("/", path)).strip("/")
    with tarfile.open(kept_archive(trial_dir), "r:gz") as tar:
        try:
            member = tar.getmember(name)
        except KeyError:
            return None
        data = tar.extractfile(member) if member.isreg() else None
        return data.read() if data is not None else None


def plain_tar(trial_dir: Path) -> bytes:
    """The kept state as an uncompressed tar (what a sandbox extracts)."""
    return gzip.decompress(kept_archive(trial_dir).read_bytes())
