"""Fresh sandboxes for verification, and repository rows graded in one.

`fresh_sandbox` takes a sandbox of the trial's environment from the pool (the verifier phase's network, none
of the agent's binds) for `[verifier] environment_mode = "separate"` (evsys.engine.trial.separate) and for
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

from evsys.engine.trial.state import TrialState
from evsys.engine.trial.verifier import VERIFIER_GRACE_SEC, collect_logs, score
from evsys.records import FailureCause, SandboxSpec
from evsys.repo.fresh import (
    PreparedTree,
    RepoGrading,
    RepoGradingError,
    grade_repository,
    integrity_of,
    prepare_grading,
)
from evsys.repo.materialise import FRESH_SANDBOX, GRADING_KEY
from evsys.repo.workspace import task_workspace
from evsys.sandbox.base import Sandbox, SandboxError
from evsys.sandbox.pool import Lease
from evsys.task.models import Task
from evsys.verify.chain import VerifierChain, VerifyContext


@dataclass
class FreshSandbox:
    """A sandbox from `fresh_sandbox`; set `reusable` when it may be reset for the next trial."""

    sandbox: Sandbox
    reusable: bool = False


@dataclass
class GradingSandbox:
    """A repository row's grading sandbox, prepared while the agent runs."""

    lease: Lease
    grading: RepoGrading
    prepared: PreparedTree


def graded_in_fresh_sandbox(task: Task) -> bool:
    """Whether `task` is a repository row evsys grades in a fresh sandbox."""
    return task.config.metadata.get(GRADING_KEY) == FRESH_SANDBOX


def verifier_sandbox_spec(state: TrialState, agent_spec: SandboxSpec) -> SandboxSpec:
    """A fresh verifier sandbox: the agent's environment with the verifier phase's network and none of the
    agent's binds."""
    policy = state.network.verifier
    return agent_spec.model_copy(
        update={
            "name": f"{agent_spec.name}-verifier",
            "network": policy.mode,
            "allowed_hosts": list(policy.allowed_hosts),
            "binds": [],
        }
    )


async def acquire_fresh(state: TrialState) -> Lease:
    """A fresh sandbox of the trial's environment (SandboxError, TimeoutError... when it cannot start)."""
    spec = verifier_sandbox_spec(state, state.require_sandbox().spec)
    limit = state.config.sandbox_start_timeout_sec
    return await state.timed("sandbox_start", state.pool.acquire(spec, timeout=limit))


@asynccontextmanager
async def fresh_sandbox(
    state: TrialState, what: str = "the separate verifier"
) -> AsyncIterator[FreshSandbox | None]:
    """A fresh sandbox of the trial's environment, released at the end (reset for reuse when `reusable`
    was set); None (with the failure recorded) when it cannot start."""
    try:
        lease = await acquire_fresh(state)
    except (TimeoutError, SandboxError, OSError, ValueError) as exc:
        state.fail(FailureCause.SANDBOX_FAILED, f"{what}'s sandbox could not start: {exc}")
        yield None
        return
    fresh = FreshSandbox(lease.sandbox)
    try:
        yield fresh
    finally:
        await lease.release(reusable=fresh.reusable)


def start_grading_preparation(state: TrialState, task: Task) -> None:
    """For a repository row: take and prepare its grading sandbox in the background while the agent runs
    (its failure is reported when the grading needs it)."""
    if state.uses_sandbox and graded_in_fresh_sandbox(task) and state.grading_prep is None:
        state.grading_prep = asyncio.create_task(_prepare_grading(state, task))


async def _prepare_grading(state: TrialState, task: Task) -> GradingSandbox:
    grading = RepoGrading.from_tests_dir(
        task.path / "tests",
        task_workspace(task.config.metadata),
        env=dict(task.config.verifier.env),
        timeout_sec=state.config.verifier_timeout_sec,
    )
    lease = await acquire_fresh(state)
    try:
        prepared = await prepare_grading(lease.sandbox, grading)
    except BaseException:
        await asyncio.shield(lease.release(reusable=False))
        raise
    return GradingSandbox(lease, grading, prepared)


async def release_grading_preparation(state: TrialState) -> None:
    """A grading sandbox prepared but never used (the trial ended before grading) goes back unused."""
    prep, state.grading_prep = state.grading_prep, None
    if prep is None:
        return
    prep.cancel()
    await asyncio.wait([prep])
    if not prep.cancelled() and prep.exception() is None:
        await prep.result().lease.release(reusable=False)


async def grade_repository_row(
    state: TrialState, task: Task, chain: VerifierChain, vctx: VerifyContext, trial_dir: Path
) -> None:
    """Copy the agent's /logs out, grade its change in the prepared sandbox, then score."""
    if not state.sandbox_alive or not await collect_logs(state, trial_dir):
        state.fail(FailureCause.SANDBOX_FAILED, "the agent's sandbox was lost before verification")
        return
    await asyncio.to_thread(shutil.rmtree, vctx.verifier_dir, True)
    timeout = state.config.verifier_timeout_sec
    limit = None if timeout is None else timeout + VERIFIER_GRACE_SEC  # preparing it + the tests
    start_grading_preparation(state, task)
    prep, state.grading_prep = state.grading_prep, None
    assert prep is not None
    try:
        await state.timed("verifier", _graded(state, prep, vctx), limit)
    except TimeoutError as exc:  # the tests' own timeout, or the whole grading's
        state.fail(
            FailureCause.VERIFIER_TIMEOUT, str(exc) or f"the verifier did not finish within {timeout:g} s"
        )
        return
    except (RepoGradingError, SandboxError, OSError, ValueError) as exc:
        cause = FailureCause.SANDBOX_FAILED if isinstance(exc, SandboxError) else FailureCause.VERIFIER_ERROR
        state.fail(cause, f"grading the repository: {exc}")
        return
    await score(state, chain, vctx)


async def _graded(state: TrialState, prep: asyncio.Task[GradingSandbox], vctx: VerifyContext) -> None:
    """Await the preparation, grade, release the grading sandbox (reset for reuse when all went well)."""
    try:
        graded = await prep
    except BaseException:
        prep.cancel()
        raise
    reusable = False
    try:
        sandbox = graded.lease.sandbox
        agent_sandbox = state.require_sandbox()
        report = await grade_repository(
            agent_sandbox, sandbox, graded.grading, vctx.verifier_dir, graded.prepared
        )
        vctx.integrity.extend(integrity_of(report))  # onto TrialResult.integrity when scored
        reusable = True
    finally:
        await graded.lease.release(reusable=reusable)
