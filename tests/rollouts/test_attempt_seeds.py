"""Seeds per attempt: one seed gives a group's samples (`num_samples`, `-k` attempts) different texts, each
reproducible: the same (seed, attempt) samples the same text in another job. Sampled hot from the tiny local
model so that different seeds almost surely give different texts."""

from __future__ import annotations

from pathlib import Path

from evsys.rollouts import run_rollouts
from evsys.task.python import VerifiedTask


async def _texts(tmp_path: Path, name: str, math_client, verifier: str, prompt: str, seed: int) -> list[str]:
    item = VerifiedTask(id="q", prompt=prompt, verifier=verifier)
    [group] = await run_rollouts(
        [item],
        model=math_client,
        num_samples=3,
        seed=seed,
        temperature=3.0,
        max_tokens=12,
        jobs_dir=tmp_path,
        job_name=name,
    )
    assert group.n_errors == 0
    return [sample.completion for sample in group.trajectories]  # in attempt order


async def test_one_seed_gives_each_attempt_its_own_reproducible_text(
    tmp_path: Path, math_client, fresh_verifier, questions
):
    verifier = fresh_verifier(lambda completion: 0.0)
    first = await _texts(tmp_path, "first", math_client, verifier, questions[0], seed=7)
    again = await _texts(tmp_path, "again", math_client, verifier, questions[0], seed=7)
    assert again == first  # deterministic for a given (seed, attempt)
    assert len(set(first)) == 3  # ... and the attempts differ: the group has variance
    other = await _texts(tmp_path, "other", math_client, verifier, questions[0], seed=8)
    assert other[0] != first[0]  # the seed itself matters
