"""`stream_rollouts`: groups come out as each task's samples are scored, complete and with advantages, in
the order they finish; groups older than `max_staleness` versions are dropped and counted."""

from __future__ import annotations

from pathlib import Path

from test_run_rollouts import _items

from evsys.streaming import stream_rollouts


async def test_every_group_streams_complete_with_its_samples_versions(
    tmp_path: Path, math_client, fresh_verifier, questions
):
    name = fresh_verifier(lambda completion, answer: float(completion.strip() == str(answer)))
    stream = await stream_rollouts(
        _items(name, questions), model=math_client, num_samples=3, n_concurrent=2, jobs_dir=tmp_path
    )
    groups = [group async for group in stream]
    assert sorted(g.task_id for g in groups) == ["q0", "q1", "q2"]
    for group in groups:
        assert [t.attempt for t in group.trajectories] == [1, 2, 3] and group.n_errors == 0
        assert all(t.weights_version is not None for t in group.trajectories)
    assert stream.stats.yielded == 3 and stream.stats.dropped == 0
    assert sum(stream.stats.versions.values()) == 9


async def test_groups_older_than_the_bound_are_dropped(
    tmp_path: Path, math_client, fresh_verifier, questions
):
    name = fresh_verifier(lambda completion, answer: float(completion.strip() == str(answer)))

    async def far_ahead() -> int:  # the trainer says it is 5 versions past what sampled these groups
        return 5 + (await math_client.weights_version())

    stream = await stream_rollouts(
        _items(name, questions[:2]),
        model=math_client,
        num_samples=2,
        jobs_dir=tmp_path,
        max_staleness=1,
        current_version=far_ahead,
    )
    assert [group async for group in stream] == []
    assert stream.stats.dropped == 2 and sorted(stream.stats.dropped_tasks) == ["q0", "q1"]
