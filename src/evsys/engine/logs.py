"""Copying a trial's `/logs` out of the sandbox into its trial dir (`agent/`, `verifier/`, `artifacts/`)."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path, PurePosixPath

from evsys.util.tarsafe import links_stay_inside

LOG_SUBDIRS = ("agent", "verifier", "artifacts")


def extract_logs(data: bytes, trial_dir: Path) -> list[str]:
    """Extract a tar of `/logs` (members named `logs/...`) straight into the trial dir, with no staging copy.

    Only members under logs/agent, logs/verifier and logs/artifacts are taken (renamed without `logs/`), so
    nothing from the sandbox can replace the trial's own config.json, result.json or trajectory.json; absolute
    names, `..` and links that point outside the trial dir are refused. Returns a warning for each member
    that was not placed (such a link, or a file where the trial already has a directory)."""
    warnings: list[str] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts
            if len(parts) < 2 or parts[0] != "logs" or parts[1] not in LOG_SUBDIRS:
                continue
            member.name = "/".join(parts[1:])
            if links_stay_inside(member, str(trial_dir)) is None:
                warnings.append(f"log entry {member.name} was not copied: a link to {member.linkname!r}")
                continue
            try:
                tar.extract(member, trial_dir, filter=links_stay_inside)
            except (OSError, tarfile.TarError) as exc:
                warnings.append(f"log file {member.name} was not copied: {exc}")
    for name in LOG_SUBDIRS:
        (trial_dir / name).mkdir(exist_ok=True)
    return warnings


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
