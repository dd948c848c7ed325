"""The oracle and nop agents in a real sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from evsys.agent import AgentContext, NopAgent, OracleAgent
from evsys.agent.oracle import MissingSolutionError
from evsys.engine.retries import is_retryable
from evsys.records import AgentInfo, FailureCause, SandboxSpec, TrajectoryRecorder
from evsys.sandbox import create_sandbox
from evsys.task import load_task


def make_task(tmp_path: Path, solve: str | None) -> Path:
    task = tmp_path / "task"
    (task / "tests").mkdir(parents=True)
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (task / "instruction.md").write_text("Do the thing.\n")
    (task / "task.toml").write_text(
        '[environment]\nworkdir = "/work"\nnetwork_mode = "no-network"\n'
        '[solution]\nenv = { WHO = "oracle" }\n'
    )
    if solve is not None:
        (task / "solution").mkdir()
        (task / "solution" / "solve.sh").write_text(solve)
    return task


async def run_agent(agent, task_dir: Path, tmp_path: Path):
    task = load_task(task_dir)
    recorder = TrajectoryRecorder("s", AgentInfo(name=agent.name))
    ctx = AgentContext(
        task=task, trial_name="t", logs_dir=tmp_path / "logs", trajectory=recorder, timeout_sec=30
    )
    box = create_sandbox(SandboxSpec(name="agent-test", workdir=task.environment.workdir))
    await box.start()
    try:
        await agent.setup(box, ctx)
        result = await agent.run(task.instruction, box, ctx)
        listing = await box.exec("cat /work/out.txt; cat /logs/agent/oracle.txt; ls /solution", user="root")
    finally:
        await box.stop()
    return result, recorder, listing.stdout


@pytest.mark.needs_sandbox
async def test_oracle_runs_solve_as_root_in_workdir_with_solution_env(tmp_path):
    solve = '#!/bin/bash\necho "$(id -u) $(pwd) $WHO" > /work/out.txt\necho solved\nexit 4\n'
    result, recorder, listing = await run_agent(OracleAgent(), make_task(tmp_path, solve), tmp_path)
    assert listing.splitlines()[:3] == ["0 /work oracle", "solved", "solve.sh"]
    assert result.metadata["exit_code"] == 4  # not an agent error: the verifier decides
    assert result.usage.cost_usd == 0 and result.usage.prompt_tokens == 0
    assert [s.source for s in recorder.steps] == ["user", "agent"]
    assert recorder.steps[0].message == "Do the thing.\n"
    assert "solved" in recorder.steps[1].message and "exited with 4" in recorder.steps[1].message


@pytest.mark.needs_sandbox
async def test_oracle_without_a_solution_is_the_tasks_defect(tmp_path):
    """A task that ships no solution fails under the oracle as `task_invalid` (its defect, never retried)."""
    with pytest.raises(MissingSolutionError, match=r"ships no solution/solve\.sh") as caught:
        await run_agent(OracleAgent(), make_task(tmp_path, None), tmp_path)
    assert caught.value.failure_cause == FailureCause.TASK_INVALID
    assert not is_retryable(caught.value.failure_cause)


@pytest.mark.needs_sandbox
async def test_nop_leaves_the_sandbox_untouched(tmp_path):
    _, recorder, listing = await run_agent(NopAgent(), make_task(tmp_path, "#!/bin/bash\n"), tmp_path)
    assert listing == ""
    assert [s.source for s in recorder.steps] == ["user"]
