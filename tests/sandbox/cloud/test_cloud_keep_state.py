"""`--keep-state` on a backend without a written layer (E2B, through its stand-in): the trial runs and scores
as usual, keeps no state, and says so in its warnings."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.asyncio


async def test_keep_state_on_e2b_is_refused_per_trial_with_a_warning(e2b_standin, tmp_path: Path) -> None:
    from standins import examples_on_standin_base

    from evsys.engine import Job, JobConfig

    config = JobConfig(
        datasets=[examples_on_standin_base(tmp_path / "tasks", ["create-file"])],
        sandbox="e2b",
        jobs_dir=tmp_path,
        job_name="kept",
        keep_state_mb=8,
    )
    job = Job(config)
    (trial,) = (await job.run()).trials
    assert (trial.failure, trial.reward) == (None, 1.0)  # the trial itself is unaffected
    assert any("--keep-state: not supported on the 'e2b' backend" in w for w in trial.warnings)
    assert not (job.store.trial_dir(trial.trial_name) / "state").exists()
