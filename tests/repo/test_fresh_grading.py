"""Fresh-sandbox grading's own edges: an agent tree over the copy bounds scores 0 with the cause (never a
verifier error an RL loop might drop)."""

from __future__ import annotations

import asyncio

import pytest
from calc_repo import calc_rows

from evsys.agent.base import Agent, AgentResult
from evsys.engine.config import AgentSpec, JobConfig
from evsys.engine.job import Job
from evsys.records import CopyOutLimits
from evsys.repo import fresh
from evsys.repo.materialise import write_task_dir
from evsys.repo.rows import RepoTask

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


class BigFileAgent(Agent):
    """Fixes neg() and writes a 3 MiB file beside it."""

    name = "big-file"
    version = "1.0"

    async def setup(self, sandbox, ctx) -> None:
        """Nothing to install."""

    async def run(self, instruction, sandbox, ctx):
        """Fix, then bloat the tree."""
        script = (
            "sed -i 's/    return a$/    return -a/' calc/__init__.py && "
            "head -c 3145728 /dev/urandom > calc/blob.bin && grep -c 'return -a' calc/__init__.py"
        )
        result = await sandbox.exec(script, cwd="/testbed")
        return AgentResult(metadata={"fixed": result.stdout.strip()})


def test_a_tree_over_the_copy_bounds_scores_zero_with_the_cause(image_tools, calc, tmp_path, monkeypatch):
    monkeypatch.setattr(fresh, "TREE_LIMITS", CopyOutLimits(max_bytes=1 << 20, max_file_bytes=4 << 20))
    row = next(r for r in calc_rows(*calc) if r["instance_id"] == "calc-neg")
    task_dir = write_task_dir(RepoTask.model_validate(row), tmp_path / "rows" / "calc-neg")
    config = JobConfig(
        datasets=[task_dir],
        agents=[AgentSpec(name="oracle"), AgentSpec(name="test_fresh_grading:BigFileAgent")],
        jobs_dir=tmp_path / "jobs",
    )
    trials = {t.agent: t for t in asyncio.run(Job(config).run()).trials}
    assert trials["oracle"].reward == 1.0  # the same bounds hold a tree that is not bloated
    big = trials["test_fresh_grading:BigFileAgent"]
    assert big.agent_metadata["fixed"] == "1"  # the fix is in: only the bloat costs the reward
    assert big.failure is None and big.reward == 0.0
    assert "over the copy bounds" in big.tests_summary
