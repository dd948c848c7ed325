"""Checking Python tasks' verifiers against their reference answers: the Python analogue of running a task
directory's oracle and nop agents (`evsys tasks check --oracle` on a Python dataset).

For each `VerifiedTask` the verifier scores the task's `reference_answer` (a correct verifier gives it 1) and
an empty answer (a verifier that gives it 1 accepts anything). A task without a reference answer, a verifier
that fails on either answer, or either expectation missed is a problem of that task. `PromptTask`s have no
verifier and are skipped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pydantic import BaseModel, Field

from evsys.task.python import PYTHON_VERIFIER_TIMEOUT_SEC, PromptTask, VerifiedTask
from evsys.task.python_manifest import REFERENCE_HINT
from evsys.verify.functions import score_python_task

MAX_CONCURRENT_CHECKS = 8


class ReferenceCheck(BaseModel):
    """One task's check: the rewards of its reference answer and of an empty answer, and what is wrong."""

    task_id: str
    reference_reward: float | None = None
    empty_reward: float | None = None
    problems: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the reference answer scored 1 and the empty answer less."""
        return not self.problems


async def check_reference_answers(tasks: Sequence[VerifiedTask | PromptTask]) -> list[ReferenceCheck]:
    """Every `VerifiedTask` of `tasks` checked (at most MAX_CONCURRENT_CHECKS at once), in their order."""
    limit = asyncio.Semaphore(MAX_CONCURRENT_CHECKS)

    async def bounded(task: VerifiedTask) -> ReferenceCheck:
        async with limit:
            return await check_task(task)

    verified = [task for task in tasks if isinstance(task, VerifiedTask)]
    return list(await asyncio.gather(*(bounded(task) for task in verified)))


async def check_task(task: VerifiedTask) -> ReferenceCheck:
    """The reference answer must score 1, an empty answer less than 1."""
    check = ReferenceCheck(task_id=task.id)
    if task.reference_answer is None:
        check.problems.append(f"no reference answer ({REFERENCE_HINT})")
        return check
    check.reference_reward = await _score(task, task.reference_answer, "the reference answer", check)
    if check.reference_reward is not None and check.reference_reward < 1:
        check.problems.append(f"the reference answer scores {check.reference_reward:g}, expected 1")
    check.empty_reward = await _score(task, "", "an empty answer", check)
    if check.empty_reward is not None and check.empty_reward >= 1:
        score = f"{check.empty_reward:g}"
        check.problems.append(f"an empty answer scores {score}, expected less than 1 (it accepts anything)")
    return check


async def _score(task: VerifiedTask, answer: str, what: str, check: ReferenceCheck) -> float | None:
    """The verifier's reward for `answer`; None (a problem recorded) when it failed."""
    timeout = task.verifier_timeout_sec or PYTHON_VERIFIER_TIMEOUT_SEC
    outcome = await score_python_task(task, answer, timeout_sec=timeout)
    if outcome is None:
        return None
    if outcome.error is not None:
        check.problems.append(f"the verifier failed on {what}: {outcome.error}")
        return None
    return outcome.reward
