"""`run_rollouts(..., agent="oracle")` answers Python tasks with their reference answers (no model, no
sandbox), and is refused before any job directory exists when a task has none."""

from __future__ import annotations

from pathlib import Path

import pytest

from evsys.rollouts import run_rollouts
from evsys.task.python import VerifiedTask


def items(fresh_verifier, references: bool) -> list[VerifiedTask]:
    """Two tasks scored by exact match with their `answer`; with `references`, that answer is theirs."""
    name = fresh_verifier(lambda completion, answer: float(completion == str(answer)))
    answers = {"sum": 42, "pair": "[1, 2]"}
    return [
        VerifiedTask(
            id=key,
            prompt=f"{key}?",
            verifier=name,
            data={"answer": answer},
            reference_answer=answer if references else None,
        )
        for key, answer in answers.items()
    ]


async def test_the_oracle_answers_with_the_reference_answers(tmp_path: Path, fresh_verifier):
    tasks = items(fresh_verifier, references=True)
    groups = await run_rollouts(tasks, agent="oracle", num_samples=2, jobs_dir=tmp_path, job_name="o")
    assert [[t.reward for t in g.trajectories] for g in groups] == [[1.0, 1.0], [1.0, 1.0]]
    assert [g.trajectories[0].trajectory.steps[-1].message for g in groups] == ["42", "[1, 2]"]


def test_a_number_or_list_reference_is_read_as_its_text():
    def reference(value) -> str | None:
        return VerifiedTask(id="n", prompt="p", verifier="v", reference_answer=value).reference_answer

    assert (reference(42), reference([1, 2]), reference("x"), reference(None)) == ("42", "[1, 2]", "x", None)


async def test_the_oracle_without_references_is_refused_before_the_job(tmp_path: Path, fresh_verifier):
    with pytest.raises(ValueError, match="agent='oracle': 2 of the 2 task"):
        await run_rollouts(items(fresh_verifier, False), agent="oracle", jobs_dir=tmp_path, job_name="o")
    assert not (tmp_path / "o").exists()
