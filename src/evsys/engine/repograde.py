"""Fresh sandboxes for verification, and the repository rows graded in one (the `Trial` half that uses them).

`_fresh_sandbox` takes a sandbox of the trial's environment from the pool (the verifier phase's network, none
of the agent's binds) for `[verifier] environment_mode = "separate"` (evsys.engine.separate) and for
repository rows. A repository row (task.toml `[metadata] evsys_repo_grading = "fresh-sandbox"`, written by
evsys.repo.materialise) is graded by `evsys.repo.fresh.grade_repository`: the agent's change, computed on the
host, applied with the test patch to a fresh tree in that fresh sandbox; the reward and report are written on
the host into the trial's verifier/ (replacing whatever the agent's /logs held), then scored as usual.
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
from evsys.repo.fresh import RepoGrading, RepoGradingError, grade_repository
from evsys.repo.materialise import FRESH_SANDBOX, GRADING_KEY
from evsys.repo.workspace import task_workspace
from evsys.sandbox.base import Sandbox, SandboxError
from evsys.task.models import Task


@dataclass
class FreshSandbox:
    """A sandbox from `_fresh_sandbox`; set `reusable` when it may be reset for the next trial."""

    sandbox: Sandbox
    reusable: bool = False


def graded_in_fresh_sandbox(task: Task) -> bool:
    """Whether `task` is a repository row evsys grades in a fresh sandbox."""
    return task.config.metadata.get(GRADING_KEY) == FRESH_SANDBOX


class RepoGradingMixin:
    """Fresh verifier sandboxes, and repository rows graded in one."""

    @asynccontextmanager
    async def _fresh_sandbox(self, what: str = "the separate verifier") -> AsyncIterator[FreshSandbox | None]:
        """A fresh sandbox of the trial's environment, released at the end (reset for reuse when
        `reusable` was set); None (with the failure recorded) when it cannot start."""
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
            self.fail(FailureCause.SANDBOX_FAILED, f"{what}'s sandbox could not start: {exc}")
            yield None
            return
        fresh = FreshSandbox(self.slots.as_sandbox(slot))
        try:
            yield fresh
        finally:
            await self.slots.release(slot, reusable=fresh.reusable)

    async def _grade_repository(self, task: Task, chain: Any, vctx: Any, trial_dir: Path) -> None:
        """Copy the agent's /logs out, grade its change in a fresh sandbox, then score."""
        if not self.sandbox_alive or not await self._collect_logs(trial_dir):
            self.fail(FailureCause.SANDBOX_FAILED, "the agent's sandbox was lost before verification")
            return
        await asyncio.to_thread(shutil.rmtree, vctx.verifier_dir, True)
        try:
            grading = RepoGrading.from_tests_dir(
                task.path / "tests",
                task_workspace(task.config.metadata),
                env=dict(task.config.verifier.env),
                timeout_sec=self.config.verifier_timeout_sec,
            )
        except (OSError, ValueError) as exc:
            self.fail(FailureCause.TASK_INVALID, f"the repository row's tests/: {exc}")
            return
        async with self._fresh_sandbox("the repository grading") as fresh:
            if fresh is None:
                return
            timeout = self.config.verifier_timeout_sec
            limit = None if timeout is None else timeout + VERIFIER_GRACE_SEC  # placing it + the tests
            try:
                work = grade_repository(self.sandbox, fresh.sandbox, grading, vctx.verifier_dir)
                await self._timed("verifier", work, limit)
            except TimeoutError as exc:  # the tests' own timeout, or the whole grading's
                message = str(exc) or f"the verifier did not finish within {timeout:g} s"
                self.fail(FailureCause.VERIFIER_TIMEOUT, message)
                return
            except RepoGradingError as exc:
                self.fail(FailureCause.VERIFIER_ERROR, f"grading the repository: {exc}")
                return
            fresh.reusable = True
        await self._score(chain, vctx)
