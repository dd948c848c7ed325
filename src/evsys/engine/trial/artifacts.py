"""A task's declared `artifacts`: copied out of the agent's sandbox into the trial's `artifacts/<destination
or base name>` after the agent (one that cannot be copied is a warning, never a failure, as in Harbor)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path, PurePosixPath

from evsys.engine.trial.state import TrialState
from evsys.sandbox.base import SandboxError
from evsys.task.models import ArtifactSpec, Task


def artifact_entries(task: Task) -> list[ArtifactSpec]:
    """The task's `artifacts`, plain strings read as `source`."""
    return [a if isinstance(a, ArtifactSpec) else ArtifactSpec(source=a) for a in task.config.artifacts]


def host_destination(artifacts_dir: Path, artifact: ArtifactSpec) -> Path:
    """Where an artifact lands in the trial's artifacts/ (its destination, else the source's base name)."""
    return artifacts_dir / (artifact.destination or PurePosixPath(artifact.source).name)


async def collect_artifacts(state: TrialState, task: Task, artifacts_dir: Path) -> list[tuple[str, Path]]:
    """Copy each declared artifact out of the trial's sandbox; (sandbox path, host copy) of each that
    exists."""
    sandbox = state.require_sandbox()
    copied = []
    for artifact in artifact_entries(task):
        target = host_destination(artifacts_dir, artifact)
        try:
            await asyncio.to_thread(shutil.rmtree, target, True)
            await sandbox.download(artifact.source, target)
        except (SandboxError, OSError) as exc:
            state.result.warnings.append(f"artifact {artifact.source}: not copied out: {exc}")
            continue
        if target.exists():
            copied.append((artifact.source, target))
    return copied
