"""A multi-step trial whose step could not be scored fails with the step's own cause: not retried, and its
sandbox (still fit for use) goes back to the pool for the next trial."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from engine_tasks import make_task

from evsys.engine import Job, JobConfig
from evsys.records import FailureCause

NO_REWARD = "#!/bin/bash\necho 'the tests ran but wrote no reward'\n"
ONE_STEP = (
    '[task]\nname = "a-steps"\n[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 60.0\n'
    '[environment]\nworkdir = "/app"\nnetwork_mode = "no-network"\n\n[[steps]]\nname = "only"\n'
)


def multi_step_task(root: Path) -> Path:
    """A one-step task whose test writes no reward file."""
    task = make_task(root, "a-steps", test=NO_REWARD, toml=ONE_STEP, instruction=None)
    (task / "steps" / "only").mkdir(parents=True)
    (task / "steps" / "only" / "instruction.md").write_text("Write ok to /app/out.txt.\n")
    return task


@pytest.mark.needs_sandbox
async def test_a_step_without_reward_is_reward_missing_not_retried_and_keeps_the_sandbox(tmp_path):
    multi_step_task(tmp_path / "tasks")
    make_task(tmp_path / "tasks", "b-after")  # the same environment: runs next, on the kept sandbox
    config = JobConfig(
        datasets=[tmp_path / "tasks"],
        jobs_dir=tmp_path / "jobs",
        job_name=f"steps-{secrets.token_hex(4)}",
        n_concurrent=1,
        max_retries=2,
        retry_min_wait_sec=0,
        retry_max_wait_sec=0,
    )
    trials = {t.task_name: t for t in (await Job(config).run()).trials}
    steps = trials["a-steps"]
    assert steps.cause == FailureCause.REWARD_MISSING, steps.failure
    assert "step 'only'" in steps.failure.message
    assert steps.steps[0].failure is not None and steps.steps[0].failure.cause == FailureCause.REWARD_MISSING
    assert steps.retries == []  # reward_missing is the task's fault: retrying cannot help
    assert trials["b-after"].sandbox_reused  # the step's sandbox was reset for it, not thrown away
    assert trials["b-after"].reward == 1.0
