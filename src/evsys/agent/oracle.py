"""The `oracle` agent: runs the task's reference solution `solution/solve.sh` (as Harbor's oracle does)."""

from __future__ import annotations

import asyncio
import contextlib

from evsys.agent.base import Agent, AgentContext, AgentError, AgentResult, AgentTimeoutError
from evsys.records import FailureCause, StepMetrics, Usage
from evsys.sandbox.base import (
    AGENT_LOGS_DIR,
    SHELL,
    SOLUTION_DIR,
    Sandbox,
    SandboxError,
)
from evsys.task.python_manifest import REFERENCE_HINT
from evsys.util.packing import pack_directory

_OUTPUT = f"{AGENT_LOGS_DIR}/oracle.txt"  # all of solve.sh's output; the trajectory gets its last 64 KiB
_MESSAGE_BYTES = 65536


class MissingSolutionError(AgentError):
    """The task ships no `solution/solve.sh`: the task's defect, not the agent's (`task_invalid`)."""

    failure_cause = FailureCause.TASK_INVALID


class OracleAgent(Agent):
    """Places `solution/` at /solution and runs `/bin/bash /solution/solve.sh` as root in the task's workdir.

    Its output goes to /logs/agent/oracle.txt. A non-zero exit does not fail the trial: the verifier decides.
    """

    name = "oracle"
    model_use = "none"
    version = "1.0"

    async def setup(self, sandbox: Sandbox, ctx: AgentContext) -> None:
        """Nothing to install."""

    async def run(self, instruction: str, sandbox: Sandbox, ctx: AgentContext) -> AgentResult:
        """Upload and run the reference solution; record the instruction and the solution's output."""
        solution = ctx.task.solution_dir
        if solution is None or not (solution / "solve.sh").is_file():
            raise MissingSolutionError(
                f"task '{ctx.task.name}' ships no solution/solve.sh, so the oracle agent cannot run it "
                "(`evsys tasks check --oracle` lists such tasks)"
            )
        ctx.trajectory.add("user", instruction)
        files = await asyncio.to_thread(pack_directory, solution)
        try:
            await sandbox.replace_tree(files, SOLUTION_DIR, mkdir=[AGENT_LOGS_DIR])
        except SandboxError as exc:
            raise AgentError(f"placing solution/ at {SOLUTION_DIR} failed: {exc}") from None
        result = await sandbox.exec_program(
            [SHELL, f"{SOLUTION_DIR}/solve.sh"],
            output_file=_OUTPUT,
            user="root",
            cwd=ctx.workdir,
            env=ctx.task.config.solution.env,
            timeout=ctx.timeout_sec,
        )
        if result.timed_out:
            raise AgentTimeoutError(f"solution/solve.sh ran past the agent timeout of {ctx.timeout_sec:g} s")
        output = b""
        with contextlib.suppress(SandboxError):
            output = await sandbox.read_file(_OUTPUT, _MESSAGE_BYTES)
        message = output.decode("utf-8", "replace")
        if result.exit_code != 0:
            message += f"\n[solve.sh exited with {result.exit_code}]"
        ctx.trajectory.add(
            "agent", message, metrics=StepMetrics(prompt_tokens=0, completion_tokens=0, cost_usd=0.0)
        )
        return AgentResult(usage=Usage(), metadata={"exit_code": result.exit_code})


class MissingReferenceError(AgentError):
    """A Python task without a reference answer: the oracle has nothing to answer (`task_invalid`)."""

    failure_cause = FailureCause.TASK_INVALID


class ReferenceAnswerAgent(Agent):
    """The oracle of a Python task: answers with the task's reference answer (its `reference_answer`, from
    the dataset's reference column), so the verifier is checked against a known-correct answer."""

    name = "oracle"
    model_use = "none"
    version = "1.0"

    def __init__(self, reference: str | None) -> None:
        self.reference = reference

    async def setup(self, sandbox: Sandbox | None, ctx: AgentContext) -> None:
        """Nothing to install."""

    async def run(self, instruction: str, sandbox: Sandbox | None, ctx: AgentContext) -> AgentResult:
        """Record the prompt and the reference answer as the agent's final message."""
        if self.reference is None:
            raise MissingReferenceError(
                f"Python task '{ctx.task.name}' has no reference answer for the oracle agent to give "
                f"({REFERENCE_HINT})"
            )
        ctx.trajectory.add("user", instruction)
        metrics = StepMetrics(prompt_tokens=0, completion_tokens=0, cost_usd=0.0)
        ctx.trajectory.add("agent", self.reference, metrics=metrics)
        return AgentResult(usage=Usage())
