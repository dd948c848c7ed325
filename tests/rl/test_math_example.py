"""examples/math: the generator reproduces train.jsonl, the dataset loads, and `exact_int` scores replies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evsys.task.python import VerifiedTask, is_python_dataset, load_python_tasks, read_dataset_config
from evsys.verify.functions import run_verifier

MATH = Path(__file__).resolve().parents[2] / "examples" / "math"


def test_generator_is_seeded_and_reproduces_the_committed_file(tmp_path: Path):
    out = tmp_path / "train.jsonl"
    subprocess.run(
        [sys.executable, str(MATH / "generate.py"), "--out", str(out)], check=True, capture_output=True
    )
    assert out.read_text(encoding="utf-8") == (MATH / "train.jsonl").read_text(encoding="utf-8")


def test_dataset_loads_from_the_directory_and_the_file():
    assert is_python_dataset(MATH)
    assert read_dataset_config(MATH).verifier == "exact_int"
    tasks = load_python_tasks(MATH)
    assert len(tasks) == 50
    assert all(isinstance(t, VerifiedTask) and t.verifier == "exact_int" for t in tasks)
    assert len({t.id for t in tasks}) == 50
    assert load_python_tasks(MATH / "train.jsonl") == tasks


def _expected(prompt: str) -> int:
    expression = prompt.removeprefix("What is ").split("?")[0]
    a, op, b = next(expression.partition(op) for op in "+*-" if op in expression[1:])
    return {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]


def test_answers_are_correct():
    for task in load_python_tasks(MATH):
        assert task.data["answer"] == _expected(task.prompt), task.id


@pytest.mark.parametrize(
    ("completion", "answer", "reward"),
    [
        ("42", 42, 1.0),
        ("19 + 23 = 42.", 42, 1.0),
        ("I think it is -3", -3, 1.0),
        ("The answer is 1,024", 1024, 1.0),
        ("It is 41, no wait, 42", 42, 1.0),
        ("42 is wrong, it is 43", 42, 0.0),
        ("no idea", 42, 0.0),
        ("", 0, 0.0),
    ],
)
async def test_exact_int_scores_the_last_integer(completion: str, answer: int, reward: float):
    load_python_tasks(MATH)  # registers exact_int
    outcome = await run_verifier("exact_int", completion, {"answer": answer})
    assert outcome.ok and outcome.reward == reward
