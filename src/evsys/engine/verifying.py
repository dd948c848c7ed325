"""The verifier half of `Trial`: the chain's in-sandbox half (the tests, bounded by the verifier timeout
plus a grace), copying `/logs` out, and scoring — rewards or the failing link's error onto the result, each
function link's reward / traceback file under `verifier/`, and a repository task's per-test summary."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from evsys.engine.logs import copy_logs_out
from evsys.engine.sandboxing import describe_exception
from evsys.records import FailureCause
from evsys.repo.report import read_tests_summary
from evsys.sandbox.base import LOGS_DIR, Sandbox, SandboxError
from evsys.verify.base import VerifierError
from evsys.verify.chain import LinkOutcome, VerifierChain, VerifyContext
from evsys.verify.functions import completion_of

VERIFIER_GRACE_SEC = 30.0


class VerifierPhaseMixin:
    """Run the tests in the trial's sandbox, copy its /logs out, and score."""

    async def _run_in_sandbox(self, chain: VerifierChain, vctx: VerifyContext) -> bool:
        """The chain's in-sandbox half (the tests); False (with the failure recorded) when there is no
        reward to read."""
        timeout = self.config.verifier_timeout_sec
        hard_limit = None if timeout is None else timeout + VERIFIER_GRACE_SEC
        if vctx.sandbox is None:
            return False
        try:
            await self._timed("verifier", chain.run_in_sandbox(vctx), hard_limit)
        except TimeoutError:
            self.fail(FailureCause.VERIFIER_TIMEOUT, f"the verifier did not finish within {timeout:g} s")
            return False
        except VerifierError as exc:
            self.fail(FailureCause(exc.failure_cause), str(exc))
            return False
        except Exception as exc:
            self.fail(FailureCause.VERIFIER_ERROR, f"the verifier failed: {describe_exception(exc)}")
            return False
        return True

    async def _score(self, chain: VerifierChain, vctx: VerifyContext) -> None:
        """The chain's host-side half: rewards (or the failing link's error) onto the result, and each
        function link's reward / traceback file under verifier/ through the store."""
        if not chain.links:  # a PromptTask: generation only
            self.result.reward = 0.0
            return
        trajectory = self.recorder.build() if self.recorder is not None else None
        self._scored_trajectory = trajectory  # saved as it was scored (the agent has finished)
        vctx.trajectory, vctx.completion = trajectory, completion_of(trajectory)
        if chain.needs_sandbox:  # the verifier time is the tests' run, counted while they ran
            outcome = await chain.verify(vctx)
        else:
            outcome = await self._timed("verifier", chain.verify(vctx))
        self.result.warnings.extend(vctx.warnings)
        if self._is_repository_task:  # its grader wrote a per-test report
            self.result.tests_summary = await asyncio.to_thread(read_tests_summary, vctx.verifier_dir)
        for link in outcome.outcomes:
            await self._record_link(link)
        if outcome.error is not None:
            self.result.rewards, self.result.reward = None, None
            self.fail(FailureCause(outcome.error.failure_cause), str(outcome.error))
        elif outcome.final is not None:
            self.result.rewards = dict(outcome.final.rewards)
            self.result.reward = outcome.final.reward

    async def _record_link(self, outcome: LinkOutcome) -> None:
        name, result = self.config.trial_name, outcome.result
        if outcome.reward_file and result.ok:
            await self.store.write_trial_file(name, f"verifier/{outcome.reward_file}", result.rewards)
        if result.traceback:
            await self.store.write_trial_file(name, "verifier/traceback.txt", result.traceback)

    async def _run_tests(self, verifier: Any) -> bool:
        """Run a `ScriptVerifier`'s tests in the trial's sandbox (a step of a multi-step task); False (with
        the failure recorded) when there is no reward to read."""
        vctx = VerifyContext(verifier_dir=Path(), sandbox=self.sandbox, timeout_sec=verifier.timeout_sec)
        return await self._run_in_sandbox(verifier, vctx)

    async def _collect_logs(self, trial_dir: Path, sandbox: Sandbox | None = None) -> bool:
        """Copy the sandbox's /logs (the trial's, unless another is given) out in one go into the trial's
        agent/, verifier/ and artifacts/ dirs."""
        if sandbox is None:
            if not self.sandbox_alive or self.sandbox is None:
                return False
            sandbox = self.sandbox
        try:  # bounded, straight into the trial dir, no staging copy
            copy = copy_logs_out(sandbox, LOGS_DIR, trial_dir, self.config.log_limits)
            self.result.warnings += await self._timed("logs_download", copy)
        except (SandboxError, OSError) as exc:
            self.result.warnings.append(f"copying /logs out failed: {exc}")
            return False
        return True
