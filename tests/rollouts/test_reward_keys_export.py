"""Per-key rewards in every export row: a verifier that scores named parts (a rubric's components, a
`has_number` check) has them in `rl`, `parquet` (and `datasets`), `sequences`, `openenv` and `sft` rows beside
the primary `reward`, as `result.json` holds them; an errored sample's map is empty."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evsys.rollouts import run_rollouts
from evsys.task.python import VerifiedTask
from evsys.trajectory.export import export_job, to_hf_dataset


@pytest.fixture
async def keyed_job(tmp_path: Path, math_client, fresh_verifier, questions):
    """A job of two tasks x two samples: `q0` scored with three named keys, `q1` whose verifier raises."""

    def graded(completion: str, boom: bool = False) -> dict[str, float]:
        if boom:
            raise ValueError("no grade")
        has_number = float(any(c.isdigit() for c in completion))
        return {"reward": 0.5 * has_number + 0.25, "has_number": has_number, "judge": 0.25}

    name = fresh_verifier(graded)
    items = [
        VerifiedTask(id="q0", prompt=questions[0], verifier=name),
        VerifiedTask(id="q1", prompt=questions[1], verifier=name, data={"boom": True}),
    ]
    groups = await run_rollouts(
        items, model=math_client, num_samples=2, jobs_dir=tmp_path, job_name="job", max_retries=0
    )
    expected = {s.trial_name: s.rewards for g in groups for s in g.trajectories}
    return tmp_path / "job", expected


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _check(rows_by_trial: dict[str, dict], expected: dict[str, dict[str, float]]) -> None:
    assert set(rows_by_trial) == set(expected)
    for trial, rewards in expected.items():
        assert rows_by_trial[trial] == rewards, trial


async def test_rl_and_token_rows_carry_every_reward_key(keyed_job, tmp_path: Path):
    job_dir, expected = keyed_job
    scored = [r for r in expected.values() if r]
    assert len(scored) == 2 and all(set(r) == {"reward", "has_number", "judge"} for r in scored)
    assert sum(1 for r in expected.values() if not r) == 2  # the raising verifier's samples
    [rl] = export_job(job_dir, "rl", tmp_path / "rl")
    _check({r["trial_name"]: r["rewards"] for r in _rows(rl)}, expected)
    [seq] = export_job(job_dir, "sequences", tmp_path / "seq")
    assert {r["trial_name"]: r["rewards"] for r in _rows(seq)} == expected
    [sft] = export_job(job_dir, "sft", tmp_path / "sft")
    assert {r["trial_name"]: r["rewards"] for r in _rows(sft)} == expected
    [openenv] = export_job(job_dir, "openenv", tmp_path / "o")
    turns = [t["metadata"] for trace in _rows(openenv) for t in trace["turns"]]
    assert turns and all(m["rewards"] == expected[m["trial_name"]] for m in turns)


async def test_parquet_rewards_are_a_struct_of_the_jobs_keys(keyed_job, tmp_path: Path):
    import pyarrow.parquet as pq

    job_dir, expected = keyed_job
    [parquet] = export_job(job_dir, "parquet", tmp_path / "p")
    table = pq.read_table(parquet)
    frame = table.to_pandas()
    by_trial = dict(zip(frame["trial_name"], frame["rewards"], strict=True))
    for trial, rewards in expected.items():
        shown = {k: v for k, v in by_trial[trial].items() if v is not None}
        assert shown == rewards, trial
    dataset = to_hf_dataset(job_dir)
    assert sorted(dataset.features["rewards"]) == ["has_number", "judge", "reward"]
    for row in dataset:
        assert {k: v for k, v in row["rewards"].items() if v is not None} == expected[row["trial_name"]]
