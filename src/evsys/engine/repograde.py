"""Fresh sandboxes for verification, and the repository rows graded in one (the `Trial` half that uses them).

`_fresh_sandbox` takes a sandbox of the trial's environment from the pool (the verifier phase's network, none
of the agent's binds) for `[verifier] environment_mode = "separate"` (evsys.engine.separate) and for
repository rows. A repository row (task.toml `[metadata] evsys_repo_grading = "fresh-sandbox"`, written by
evsys.repo.materialise) is graded by `evsys.repo.fresh`: its grading sandbox is taken and prepared (base tree,
install commands) while the agent runs — nothing there depends on the agent — and after the agent the agent's
change, computed on the host, is applied with the test patch and the tests run; the reward and report are
written on the host into the trial's verifier/ (replacing whatever the agent's /logs held), then scored.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evsys.engine.results import FailureCause
from evsys.engine.verifying import VERIFIER_GRACE_SEC
from evsys.repo.fresh import PreparedTree, RepoGrading, RepoGradingError, grade_repository, prepare_grading
from evsys.repo.materialise import FRESH_SANDBOX, GRADING_KEY
from evsys.repo.workspace import task_workspace
from evsys.sandbox.base import Sandbox, SandboxError
from evsys.sandbox.slots import Slot
from evsys.task.models import Task


@dataclass
class FreshSandbox:
    """A sandbox from `_fresh_sandbox`; set `reusable` when it may be reset for the next trial."""

    sandbox: Sandbox
    reusable: bool = False


@dataclass
class GradingSandbox:
    """A repository row's grading sandbox, prepared while the agent runs."""

    slot: Slot
    grading: RepoGrading
    prepared: PreparedTree


def graded_in_fresh_sandbox(task: Task) -> bool:
    """Whether `task` is a repository row evsys grades in a fresh sandbox."""
    return task.config.metadata.get(GRADING_KEY) == FRESH_SANDBOX


class RepoGradingMixin:
    """Fresh verifier sandboxes, and repository rows graded in one."""

    _grading_prep: asyncio.Task[GradingSandbox] | None = None

    async def _acquire_fresh(self) -> Slot:
        """A fresh slot of the trial's environment (SandboxError, TimeoutError... when it cannot start)."""
        policy = self.network.verifier
        spec = self.sandbox.spec.model_copy(
            update={
                "name": f"{self.sandbox.spec.name}-verifier",
                "network": policy.mode,
                "allowed_hosts": list(policy.allowed_hosts),
                "binds": [],
            }
        )
        limit = self.config.sandbox_start_timeout_sec
        return await self._timed(
            "sandbox_start", self.slots.acquire(self.spec.trial_name, spec, timeout=limit)
        )

    @asynccontextmanager
    async def _fresh_sandbox(self, what: str = "the separate verifier") -> AsyncIterator[FreshSandbox | None]:
        """A fresh sandbox of the trial's environment, released at the end (reset for reuse when
        `reusable` was set); None (with the failure recorded) when it cannot start."""
        try:
            slot = await self._acquire_fresh()
        except (TimeoutError, SandboxError, OSError, ValueError) as exc:
            self.fail(FailureCause.SANDBOX_FAILED, f"{what}'s sandbox could not start: {exc}")
            yield None
            return
        fresh = FreshSandbox(self.slots.as_sandbox(slot))
        try:
            yield fresh
        finally:
            await self.slots.release(slot, reusable=fresh.reusable)

    # --- repository rows ---
    def _start_grading_preparation(self, task: Task) -> None:
        """For a repository row: take and prepare its grading sandbox in the background while the agent
        runs (its failure is reported when the grading needs it)."""
        if self.uses_sandbox and graded_in_fresh_sandbox(task) and self._grading_prep is None:
            self._grading_prep = asyncio.create_task(self._prepare_grading(task))

    async def _prepare_grading(self, task: Task) -> GradingSandbox:
        grading = RepoGrading.from_tests_dir(
            task.path / "tests",
            task_workspace(task.config.metadata),
            env=dict(task.config.verifier.env),
            timeout_sec=self.config.verifier_timeout_sec,
        )
        slot = await self._acquire_fresh()
        try:
            prepared = await prepare_grading(self.slots.as_sandbox(slot), grading)
        except BaseException:
            await asyncio.shield(self.slots.release(slot, reusable=False))
            raise
        return GradingSandbox(slot, grading, prepared)

    async def _release_grading_preparation(self) -> None:
        """A grading sandbox prepared but never used (the trial ended before grading) goes back unused."""
        prep, self._grading_prep = self._grading_prep, None
        if prep is None:
            return
        prep.cancel()
        await asyncio.wait([prep])
        if not prep.cancelled() and prep.exception() is None:
            await self.slots.release(prep.result().slot, reusable=False)

    async def _grade_repository(self, task: Task, chain: Any, vctx: Any, trial_dir: Path) -> None:
        """Copy the agent's /logs out, grade its change in the prepared sandbox, then score."""
        if not self.sandbox_alive or not await self._collect_logs(trial_dir):
            self.fail(FailureCause.SANDBOX_FAILED, "the agent's sandbox was lost before verification")
            return
        await asyncio.to_thread(shutil.rmtree, vctx.verifier_dir, True)
        timeout = self.config.verifier_timeout_sec
        limit = None if timeout is None else timeout + VERIFIER_GRACE_SEC  # preparing it + the tests
        self._start_grading_preparation(task)
        prep, self._grading_prep = self._grading_prep, None
        assert prep is not None
        try:
            await self._timed("verifier", self._graded(prep, vctx), limit)
        except TimeoutError as exc:  # the tests' own timeout, or the whole grading's
            self.fail(
                FailureCause.VERIFIER_TIMEOUT, str(exc) or f"the verifier did not finish within {timeout:g} s"
            )
            return
        except (RepoGradingError, SandboxError, OSError, ValueError) as exc:
            cause = (
                FailureCause.SANDBOX_FAILED if isinstance(exc, SandboxError) else FailureCause.VERIFIER_ERROR
            )
            self.fail(cause, f"grading the repository: {exc}")
            return
        await self._score(chain, vctx)

    async def _graded(self, prep: asyncio.Task[GradingSandbox], vctx: Any) -> None:
        """Await the preparation, grade, release the grading sandbox (reset for reuse when all went well)."""
        try:
            graded = await prep
        except BaseException:
            prep.cancel()
            raise
        reusable = False
        try:
            sandbox = self.slots.as_sandbox(graded.slot)
            await grade_repository(self.sandbox, sandbox, graded.grading, vctx.verifier_dir, graded.prepared)
            reusable = True
        finally:
            await self.slots.release(graded.slot, reusable=reusable)
