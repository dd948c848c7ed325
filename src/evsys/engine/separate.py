"""`[verifier] environment_mode = "separate"`: the tests run in a fresh sandbox, not the agent's.

As Harbor 0.25 does it: after the agent, its `/logs` is copied out (agent/, artifacts/) and each declared
`artifacts` entry is copied out of the agent's sandbox into the trial's `artifacts/<destination or base
name>`; then a fresh sandbox of the same environment (the verifier phase's network, none of the agent's
binds) receives those artifacts at their original paths and `/logs/artifacts`, the tests run there, and its
`/logs/verifier` is the one scored. Nothing else of the agent's sandbox — files it changed, processes it
left — reaches the verifier. The verifier's sandbox comes from the same pool and is released (reset for reuse
when it has no network) when the verification is over.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path, PurePosixPath
from typing import Any

from evsys.records import FailureCause
from evsys.sandbox.base import ARTIFACTS_DIR, Sandbox, SandboxError
from evsys.task.models import ArtifactSpec, Task


def artifact_entries(task: Task) -> list[ArtifactSpec]:
    """The task's `artifacts`, plain strings read as `source`."""
    return [a if isinstance(a, ArtifactSpec) else ArtifactSpec(source=a) for a in task.config.artifacts]


def host_destination(artifacts_dir: Path, artifact: ArtifactSpec) -> Path:
    """Where an artifact lands in the trial's artifacts/ (its destination, else the source's base name)."""
    return artifacts_dir / (artifact.destination or PurePosixPath(artifact.source).name)


class SeparateVerifierMixin:
    """The separate-verifier half of `Trial` (evsys.engine.trial)."""

    async def _collect_artifacts(self, task: Task, artifacts_dir: Path) -> list[tuple[str, Path]]:
        """Copy each declared artifact out of the agent's sandbox; (sandbox path, host copy) of each that
        exists. One that cannot be copied is a warning, never a failure (as in Harbor)."""
        copied = []
        for artifact in artifact_entries(task):
            target = host_destination(artifacts_dir, artifact)
            try:
                await asyncio.to_thread(shutil.rmtree, target, True)
                await self.sandbox.download(artifact.source, target)
            except (SandboxError, OSError) as exc:
                self.result.warnings.append(f"artifact {artifact.source}: not copied out: {exc}")
                continue
            if target.exists():
                copied.append((artifact.source, target))
        return copied

    async def _verify_separately(self, task: Task, chain: Any, vctx: Any, trial_dir: Path) -> None:
        """Copy the agent's /logs and artifacts out, then run the chain's in-sandbox half in a fresh sandbox
        that received them, copy its /logs out and score."""
        if not self.sandbox_alive or not await self._collect_logs(trial_dir):
            self.fail(FailureCause.SANDBOX_FAILED, "the agent's sandbox was lost before verification")
            return
        artifacts = await self._collect_artifacts(task, trial_dir / "artifacts")
        policy = self.network.verifier
        spec = self.sandbox.spec.model_copy(
            update={
                "name": f"{self.sandbox.spec.name}-verifier",
                "network": policy.mode,
                "allowed_hosts": list(policy.allowed_hosts),
                "binds": [],
            }
        )
        try:
            limit = self.config.sandbox_start_timeout_sec
            slot = await self._timed(
                "sandbox_start", self.slots.acquire(self.spec.trial_name, spec, timeout=limit)
            )
        except (TimeoutError, SandboxError, OSError, ValueError) as exc:
            self.fail(FailureCause.SANDBOX_FAILED, f"the separate verifier's sandbox could not start: {exc}")
            return
        reusable = False
        try:
            reusable = await self._verify_in(self.slots.as_sandbox(slot), chain, vctx, artifacts, trial_dir)
        finally:
            await self.slots.release(slot, reusable=reusable)

    async def _verify_in(
        self, sandbox: Sandbox, chain: Any, vctx: Any, artifacts: list[tuple[str, Path]], trial_dir: Path
    ) -> bool:
        """Place the artifacts, run the tests, score; True when the sandbox is fit for reuse."""
        try:
            logs_artifacts = trial_dir / "artifacts"
            if logs_artifacts.is_dir():
                await sandbox.upload(logs_artifacts, ARTIFACTS_DIR)
            for source, host_copy in artifacts:
                await sandbox.upload(host_copy, source)
        except SandboxError as exc:
            self.fail(FailureCause.SANDBOX_FAILED, f"placing the artifacts in the verifier's sandbox: {exc}")
            return False
        vctx.sandbox = sandbox
        if not await self._run_in_sandbox(chain, vctx):
            return True
        if not await self._collect_logs(trial_dir, sandbox):
            message = "could not copy /logs/verifier out of the verifier's sandbox"
            self.fail(FailureCause.VERIFIER_ERROR, message)
            return False
        await self._score(chain, vctx)
        return True
