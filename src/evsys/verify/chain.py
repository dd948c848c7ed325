"""The verifier chain the engine runs after the agent: built from the task's config, one seam for every kind.

```
task directory:  ScriptVerifier (tests/test.sh -> reward.json)  ->  FunctionVerifier ([verifier] function)
Python task:     FunctionVerifier (the task's verifier function, or a RubricVerifier / LLM judge behind it)
PromptTask:      no link (generation only, reward 0)
```
Each link is a `Verifier` (evsys.verify.base): `run_in_sandbox(ctx)` while the sandbox is alive (the
`ScriptVerifier` places and runs the tests there; the others do nothing), then — after the engine copied
`/logs` out — `verify(ctx)` returns a `VerifierResult`. Each link sees the rewards of the links before it as
`ctx.rewards`, and its rewards replace them. The first link that fails ends the chain: a `VerifierError`
whose `failure_cause` becomes the trial's. A verifier function is referenced by a registered name or an
importable name (`pkg.mod:fn`, `file.py:fn`) so a worker in another process can load it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evsys.records import IntegrityFinding, Trajectory
from evsys.sandbox.base import Sandbox
from evsys.task.models import Task
from evsys.task.python import PromptTask, VerifiedTask
from evsys.verify.base import Verifier, VerifierError, VerifierResult, VerifierTimeoutError
from evsys.verify.functions import run_verifier
from evsys.verify.script import ScriptVerifier


@dataclass
class VerifyContext:
    """What the links see: the sandbox (None once gone), host dirs, the run's text, earlier rewards."""

    verifier_dir: Path
    sandbox: Sandbox | None = None
    completion: str = ""
    trajectory: Trajectory | None = None
    prompt: str | None = None
    base_dir: Path | None = None
    timeout_sec: float | None = None
    rewards: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # what the links saw the run try against its grader; the engine puts them on TrialResult.integrity
    integrity: list[IntegrityFinding] = field(default_factory=list)


@dataclass
class LinkOutcome:
    """One link's result and the host file (under verifier/) the engine records its rewards in, if any."""

    name: str
    result: VerifierResult
    reward_file: str | None = None


@dataclass
class ChainResult:
    """The chain's outcome: every link that ran, and the error of the one that failed (None when none did)."""

    outcomes: list[LinkOutcome] = field(default_factory=list)
    error: VerifierError | None = None

    @property
    def final(self) -> VerifierResult | None:
        """The last link's result when the chain succeeded: the trial's rewards."""
        return self.outcomes[-1].result if self.outcomes and self.error is None else None


class FunctionVerifier:
    """A verifier function (or a `RubricVerifier`) run host-side over the completion, with the task's data."""

    needs_sandbox = False

    def __init__(
        self,
        function: str,
        *,
        data: Mapping[str, Any] | None = None,
        task: VerifiedTask | None = None,
        label: str = "",
    ) -> None:
        self.function = function
        self.data = dict(data or {})
        self.task = task
        self.name = label or f"verifier function '{function}'"

    async def run_in_sandbox(self, ctx: VerifyContext) -> None:
        """Nothing: a verifier function never runs inside the agent's sandbox."""

    async def verify(self, ctx: VerifyContext) -> VerifierResult:
        """Call the function; its errors come back in `VerifierResult.error` (never raised)."""
        extra: dict[str, Any] = {"task": self.task} if self.task is not None else {}
        return await run_verifier(
            self.function,
            ctx.completion,
            self.data,
            timeout_sec=ctx.timeout_sec,
            base_dir=ctx.base_dir,
            rewards=dict(ctx.rewards),
            prompt=ctx.prompt,
            trajectory=ctx.trajectory,
            **extra,
        )


class VerifierChain:
    """Links run in order; see the module docstring."""

    def __init__(self, links: list[Verifier]) -> None:
        self.links = list(links)

    @property
    def needs_sandbox(self) -> bool:
        """True when a link runs inside the sandbox (the test script)."""
        return any(link.needs_sandbox for link in self.links)

    async def run_in_sandbox(self, ctx: VerifyContext) -> None:
        """Every link's in-sandbox half, in order (raises the first `VerifierError`)."""
        for link in self.links:
            await link.run_in_sandbox(ctx)

    async def verify(self, ctx: VerifyContext) -> ChainResult:
        """Score link by link, each seeing the rewards before it; stops at the first link that fails (a
        raised `VerifierError`, or a result with an `error`)."""
        chain = ChainResult()
        for index, link in enumerate(self.links):
            try:
                result = await link.verify(ctx)
            except VerifierError as exc:
                chain.error = exc
                return chain
            ctx.warnings.extend(result.warnings)
            ctx.integrity.extend(result.integrity)
            reward_file = None
            if isinstance(link, FunctionVerifier):
                reward_file = "reward.json" if index == 0 else "function-reward.json"
            chain.outcomes.append(LinkOutcome(name=link.name, result=result, reward_file=reward_file))
            if result.error is not None:
                kind = VerifierTimeoutError if result.timed_out else VerifierError
                chain.error = kind(f"{link.name}: {result.error}" if index else result.error)
                return chain
            ctx.rewards = dict(result.rewards)
        return chain


def chain_for_task(
    task: Task, python_task: VerifiedTask | PromptTask | None = None, timeout_sec: float | None = None
) -> VerifierChain:
    """The chain a task's config asks for: a task directory's tests/test.sh, then its `[verifier] function`;
    a Python task's verifier function; no link for a `PromptTask` (generation only, reward 0)."""
    if python_task is not None:
        if not isinstance(python_task, VerifiedTask):
            return VerifierChain([])
        return VerifierChain(
            [FunctionVerifier(python_task.verifier, data=python_task.data, task=python_task)]
        )
    config = task.config.verifier
    links: list[Verifier] = [
        ScriptVerifier(
            task.tests_dir or task.path / "tests",
            timeout_sec=timeout_sec,
            env=config.env,
            user=config.user,
            workdir=task.environment.workdir,
        )
    ]
    if config.function:
        label = f"task.toml:verifier.function '{config.function}'"
        links.append(FunctionVerifier(config.function, label=label))
    return VerifierChain(links)
