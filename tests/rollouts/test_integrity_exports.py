"""Integrity findings end to end: a verifier reports one on a trial it scored 1.0; `run_rollouts` zeroes it
(the default policy), and every export of the job carries the findings, with each policy's rewards."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path

import pytest

from evsys.records import IntegrityFinding
from evsys.rollouts import run_rollouts
from evsys.task.python import VerifiedTask
from evsys.trajectory.export import export_job
from evsys.verify.base import VerifierResult

FORGED = IntegrityFinding(kind="run_void", evidence="the runner exited before its report", source="repo")
FINDING = FORGED.model_dump(mode="json")


@pytest.fixture
async def hacked_job(tmp_path: Path, math_client, fresh_verifier, questions):
    """A run_rollouts job of one task, three samples graded in turn: an honest 1, an honest 0, and a forged
    1 the verifier saw through (a finding)."""
    lock, order = threading.Lock(), itertools.count()

    def graded(completion: str) -> float | VerifierResult:
        with lock:
            turn = next(order)
        if turn == 2:
            return VerifierResult(rewards={"reward": 1.0}, integrity=[FORGED])
        return 1.0 - turn

    item = VerifiedTask(id="q", prompt=questions[0], verifier=fresh_verifier(graded))
    [group] = await run_rollouts(
        [item], model=math_client, num_samples=3, jobs_dir=tmp_path, job_name="job", max_retries=0
    )
    return tmp_path / "job", group


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_run_rollouts_zeroes_the_hacked_sample(hacked_job):
    _, group = hacked_job
    hacked = next(s for s in group.trajectories if s.integrity)
    honest_0 = next(s for s in group.trajectories if not s.integrity and s.reward == 0.0)
    assert hacked.integrity == [FORGED] and hacked.reward == 0.0 and not hacked.screened
    assert hacked.advantage == pytest.approx(honest_0.advantage) and hacked.advantage < 0
    assert sorted(group.rewards) == [0.0, 0.0, 1.0] and group.n_with_findings == 1


async def test_rl_export_carries_the_findings_under_each_policy(hacked_job, tmp_path: Path):
    job_dir, _ = hacked_job
    by_policy = {}
    for policy in ("zero", "screen", "flag"):
        [path] = export_job(job_dir, "rl", tmp_path / policy, integrity=policy)
        rows = _rows(path)
        by_policy[policy] = next(r for r in rows if r["integrity"])
        assert [r["integrity"] for r in rows].count([]) == 2  # the honest two: an empty list
        assert by_policy[policy]["integrity"] == [FINDING]
        assert by_policy[policy]["integrity_kinds"] == ["run_void"]
    assert (by_policy["zero"]["reward"], by_policy["zero"]["screened"]) == (0.0, False)
    assert by_policy["zero"]["advantage"] == pytest.approx(-1 / 3)
    assert (by_policy["screen"]["reward"], by_policy["screen"]["screened"]) == (1.0, True)
    assert by_policy["screen"]["advantage"] == 0.0
    assert (by_policy["flag"]["reward"], by_policy["flag"]["screened"]) == (1.0, False)
    assert by_policy["flag"]["advantage"] == pytest.approx(1 / 3)


async def test_every_other_export_carries_the_findings(hacked_job, tmp_path: Path):
    import pyarrow.parquet as pq

    job_dir, group = hacked_job
    hacked = next(s.trial_name for s in group.trajectories if s.integrity)
    [parquet] = export_job(job_dir, "parquet", tmp_path / "p")
    table = {r["trial_name"]: r for r in pq.read_table(parquet).to_pylist()}
    assert table[hacked]["integrity"] == [FINDING] and table[hacked]["integrity_kinds"] == ["run_void"]
    for fmt in ("sequences", "sft"):
        [path] = export_job(job_dir, fmt, tmp_path / fmt)
        rows = {r["trial_name"]: r for r in _rows(path)}
        assert rows[hacked]["integrity"] == [FINDING] and rows[hacked]["reward"] == 0.0, fmt
    [openenv] = export_job(job_dir, "openenv", tmp_path / "o")
    turns = [t["metadata"] for trace in _rows(openenv) for t in trace["turns"]]
    assert [m["integrity"] for m in turns if m["trial_name"] == hacked] == [[FINDING]]
    copies = export_job(job_dir, "atif", tmp_path / "a")
    atif = {p.stem: json.loads(p.read_text()) for p in copies}
    assert atif[hacked]["extra"]["integrity"] == [FINDING]
    assert atif[hacked]["schema_version"].startswith("ATIF")
    [ok] = export_job(job_dir, "sft", tmp_path / "ok", successful_only=True, integrity="screen")
    assert hacked not in {r["trial_name"] for r in _rows(ok)}  # a screened sample is never a success
