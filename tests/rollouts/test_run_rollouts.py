"""`run_rollouts` end to end with a real tiny model: groups in input order, token-exact samples, rewards from
registered verifiers, mean-centred advantages, generation-only runs that never verify, and a failing verifier
that only fails its own item."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evsys.rollouts import run_rollouts
from evsys.task.python import PromptTask, VerifiedTask


def _files(root: Path, pattern: str) -> list[Path]:
    return list(root.glob(pattern))


def _items(verifier: str, questions: list[str]) -> list[VerifiedTask]:
    return [
        VerifiedTask(id=f"q{i}", prompt=q, verifier=verifier, data={"answer": 42})
        for i, q in enumerate(questions)
    ]


async def test_three_items_four_samples_give_ordered_scored_groups(
    tmp_path: Path, math_client, fresh_verifier, questions
):
    calls: list[str] = []

    def answer_is_42(completion: str, answer: int, trajectory=None) -> float:
        """Right answers score 1 on odd attempts and 0.5 on even ones, so every group has a spread."""
        calls.append(completion)
        odd = trajectory.session_id.endswith(("__1", "__3"))
        return float(completion.strip() == str(answer)) * (1.0 if odd else 0.5)

    name = fresh_verifier(answer_is_42)
    items = _items(name, questions)[::-1]  # input order differs from id order
    groups = await run_rollouts(
        items, model=math_client, num_samples=4, n_concurrent=4, jobs_dir=tmp_path, temperature=1.0
    )
    assert [g.task_id for g in groups] == ["q2", "q1", "q0"]
    assert len(calls) == 12
    for group in groups:
        assert len(group.trajectories) == 4 and group.n_errors == 0
        assert [t.attempt for t in group.trajectories] == [1, 2, 3, 4]
        for sample in group.trajectories:
            assert sample.prompt_token_ids and sample.completion_token_ids
            assert len(sample.loss_mask) == len(sample.completion_token_ids) == len(sample.logprobs)
            assert set(sample.loss_mask) == {1}
            assert all(lp <= 0.0 and math.isfinite(lp) for lp in sample.logprobs)
            weight = 1.0 if sample.attempt % 2 else 0.5
            assert sample.reward == float(sample.completion.strip() == "42") * weight
            assert sample.rewards == {"reward": sample.reward}
            steps = sample.trajectory.steps
            assert steps[-1].metrics.completion_token_ids == sample.completion_token_ids
        assert sum(group.advantages) == pytest.approx(0.0, abs=1e-9)
        assert group.zero_variance == (len(set(group.rewards)) == 1)
        mean = sum(group.rewards) / 4
        assert group.advantages == pytest.approx([r - mean for r in group.rewards])


async def test_generation_only_never_calls_a_verifier(tmp_path: Path, math_client, fresh_verifier, questions):
    def must_not_run(completion: str, answer: int) -> float:
        pytest.fail("a generation-only rollout called the verifier")

    name = fresh_verifier(must_not_run)
    items = [*_items(name, questions)[:2], "Write a haiku about sandboxes"]
    groups = await run_rollouts(
        items, outcome_reward=False, model=math_client, num_samples=2, jobs_dir=tmp_path, max_tokens=16
    )
    assert [g.task_id for g in groups] == ["q0", "q1", "prompt-2"]
    for group in groups:
        assert group.n_errors == 0 and group.zero_variance
        for sample in group.trajectories:
            assert sample.reward == 0.0 and sample.advantage == 0.0
            assert sample.completion_token_ids and len(sample.completion_token_ids) <= 16
    assert not _files(tmp_path, "*/*/verifier/reward.json")


async def test_a_raising_verifier_fails_only_its_item(tmp_path: Path, math_client, fresh_verifier, questions):
    def flaky(completion: str, answer: int, boom: bool = False) -> float:
        if boom:
            raise RuntimeError("grader crashed")
        return 1.0

    name = fresh_verifier(flaky)
    items = _items(name, questions)
    items[1] = items[1].model_copy(update={"data": {"answer": 42, "boom": True}})
    groups = await run_rollouts(items, model=math_client, num_samples=2, jobs_dir=tmp_path, max_retries=0)
    ok_a, bad, ok_b = groups
    for group in (ok_a, ok_b):
        assert group.n_errors == 0 and group.rewards == [1.0, 1.0]
    assert bad.n_errors == 2 and bad.errors_by_cause == {"verifier_error": 2}
    assert len(bad.trajectories) == 2
    for sample in bad.trajectories:
        assert "grader crashed" in sample.error.message and sample.reward == 0.0
        assert sample.completion_token_ids  # the sample itself is kept
        [traceback_file] = _files(tmp_path, f"*/{sample.trial_name}/verifier/traceback.txt")
        assert "RuntimeError: grader crashed" in traceback_file.read_text()


async def test_bad_items_are_rejected_with_the_index(tmp_path: Path, math_client):
    with pytest.raises(ValueError, match=r"items\[0\] is a plain prompt"):
        await run_rollouts(["hi"], model=math_client, jobs_dir=tmp_path)
    with pytest.raises(ValueError, match=r"items\[1\]: duplicate id 'a'"):
        await run_rollouts(
            [PromptTask(id="a", prompt="x"), PromptTask(id="a", prompt="y")],
            outcome_reward=False,
            model=math_client,
            jobs_dir=tmp_path,
        )
    with pytest.raises(ValueError, match="num_samples must be >= 1"):
        await run_rollouts(["x"], outcome_reward=False, model=math_client, num_samples=0, jobs_dir=tmp_path)


async def test_agentic_item_runs_the_loop_agent_in_a_sandbox(tmp_path: Path, math_client, fresh_verifier):
    seen: list[tuple[str, int]] = []

    def record(completion: str, answer: int, trajectory=None) -> float:
        seen.append((completion, len(trajectory.steps)))
        return 0.5

    item = VerifiedTask(
        id="agentic", prompt="What is 19+23?", verifier=fresh_verifier(record), data={"answer": 42}
    )
    [group] = await run_rollouts(
        [item], model=math_client, sandbox=True, max_turns=2, max_tokens=16, jobs_dir=tmp_path, max_retries=0
    )
    [sample] = group.trajectories
    assert sample.error is None, sample.error
    assert sample.reward == 0.5 and seen == [(sample.completion, len(sample.trajectory.steps))]
    assert [s.source for s in sample.trajectory.steps][:2] == ["system", "user"]
    assert "Linux sandbox" in sample.trajectory.steps[0].message  # the loop agent's own system prompt
    tools = [t["function"]["name"] for t in sample.trajectory.agent.tool_definitions]
    assert "bash" in tools and "submit" in tools
    assert sample.completion_token_ids and set(sample.loss_mask) <= {0, 1}
    [result_file] = _files(tmp_path, "*/agentic__*/result.json")
    result = json.loads(result_file.read_text())
    assert result["sandbox_name"] and result["timing"]["sandbox_start"] is not None


async def test_a_trainers_pool_serves_its_next_step_with_the_sandboxes_of_the_last(
    tmp_path: Path, math_client, fresh_verifier, eventually
):
    """`run_rollouts(..., sandboxes=pool)` at every step: the second step's trials start on the first
    step's sandboxes, reset; the pool outlives both calls."""
    from evsys.sandbox.pool import SandboxPool

    verifier = fresh_verifier(lambda completion, answer, trajectory=None: 1.0)
    item = VerifiedTask(id="step", prompt="What is 19+23?", verifier=verifier, data={"answer": 42})
    settings = {"model": math_client, "sandbox": True, "max_turns": 1, "max_tokens": 4, "jobs_dir": tmp_path}
    async with SandboxPool.for_backend("local", max_idle=2) as pool:
        for step in ("one", "two"):
            [group] = await run_rollouts([item], num_samples=2, job_name=step, sandboxes=pool, **settings)
            assert [s.error for s in group.trajectories] == [None, None]
        await eventually(lambda: pool.idle_count == 2, "both sandboxes idle in the pool")
    reused = [
        (path.parent.parent.name, json.loads(path.read_text())["sandbox_reused"])
        for path in _files(tmp_path, "*/step__*/result.json")
    ]
    assert sorted(reused) == [("one", False), ("one", False), ("two", True), ("two", True)]


async def test_a_rollout_job_resumes_from_its_saved_tasks(
    tmp_path: Path, math_client, fresh_verifier, questions
):
    from evsys.engine.job import Job
    from evsys.rollouts import BorrowedModelClient

    name = fresh_verifier(lambda completion, answer: 1.0)
    items = _items(name, questions)
    groups = await run_rollouts(items, model=math_client, num_samples=2, jobs_dir=tmp_path, job_name="r")
    lost = groups[1].trajectories[0].trial_name
    (tmp_path / "r" / lost / "result.json").unlink()
    rerun: list[str] = []
    job = Job.resume(
        tmp_path / "r",
        on_trial_done=lambda result: rerun.append(result.trial_name),
        model_client_factory=lambda _spec: BorrowedModelClient(math_client),
    )
    result = await job.run()
    assert rerun == [lost] and result.complete and result.n_done == 6 and result.mean_reward == 1.0
    with pytest.raises(ValueError, match="already exists"):
        await run_rollouts(items, model=math_client, jobs_dir=tmp_path, job_name="r")


async def test_dict_rows_are_read_like_dataset_rows(tmp_path: Path, math_client, fresh_verifier, questions):
    name = fresh_verifier(lambda completion, answer: float(answer == 42))
    rows = [
        {"prompt": questions[0], "verifier": name, "answer": 42},
        {"id": "mine", "prompt": "x", "verifier": name, "answer": 7},
    ]
    first, second = await run_rollouts(rows, model=math_client, jobs_dir=tmp_path, max_tokens=4)
    assert (first.task_id, first.rewards) == ("item-0", [1.0])
    assert (second.task_id, second.rewards) == ("mine", [0.0])
    with pytest.raises(ValueError, match="row 1: prompt"):
        await run_rollouts([{"verifier": name}], model=math_client, jobs_dir=tmp_path)
