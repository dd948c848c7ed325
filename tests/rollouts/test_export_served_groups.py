"""Exports group served episodes only by what their clients sent together: trials of one task recorded with
different groups (`TrialResult.group`: a client's group_id, else its session's) are separate groups with their
own advantages; a job's own trials (no group) stay grouped per task. Job directories written by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from handmade_jobs import make_job_dir, write_trial

from evsys.records import TrialResult
from evsys.trajectory.export import load_job_groups, rl_rows


@pytest.fixture
def served_job(tmp_path: Path) -> Path:
    """Two clients' groups of one task: A scored 1 and 0, B scored 1 and 1."""
    job_dir = make_job_dir(tmp_path / "serve")
    for name, reward, group in [("a1", 1.0, "A"), ("a2", 0.0, "A"), ("b1", 1.0, "B"), ("b2", 1.0, "B")]:
        write_trial(job_dir, name, reward, group=group)
    return job_dir


def test_served_episodes_are_grouped_by_their_client_group(served_job: Path):
    rows = {row["trial_name"]: row for row in rl_rows(load_job_groups(served_job))}
    assert rows["a1"]["group_id"] == rows["a2"]["group_id"] == "serve/evsys/create-file/A"
    assert rows["b1"]["group_id"] == rows["b2"]["group_id"] == "serve/evsys/create-file/B"
    # A's baseline is A's mean (0.5), B's is B's (1.0); pooled, b1 would have had +0.25
    assert [rows[n]["advantage"] for n in ("a1", "a2", "b1", "b2")] == [0.5, -0.5, 0.0, 0.0]


def test_trials_without_a_group_stay_grouped_per_task(served_job: Path):
    for name in ("a1", "a2", "b1", "b2"):  # the same results, recorded by a job of its own
        path = served_job / name / "result.json"
        result = TrialResult.model_validate_json(path.read_text())
        path.write_text(result.model_copy(update={"group": None}).model_dump_json())
    [group] = load_job_groups(served_job)
    assert group.group_id == "serve/evsys/create-file" and len(group.trajectories) == 4
    assert [t.advantage for t in group.trajectories] == [0.25, -0.75, 0.25, 0.25]
