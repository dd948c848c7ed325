"""Planning Python-task datasets: `dataset.toml` directories become one trial per row and attempt, in row
order; a dataset with bad rows fails the plan with every row named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evsys.engine.config import AgentSpec, JobConfig
from evsys.engine.plan import PlanError, plan_trials

REPO = Path(__file__).resolve().parents[2]


def _dataset(root: Path, rows: list[dict]) -> Path:
    root.mkdir()
    (root / "dataset.toml").write_text('[dataset]\ndata = "rows.jsonl"\nverifier = "exact_int"\n')
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def _config(path: Path, tmp_path: Path, **kwargs) -> JobConfig:
    agent = AgentSpec(name="loop", model="local")
    return JobConfig(datasets=[path], agents=[agent], jobs_dir=tmp_path / "jobs", **kwargs)


def test_python_dataset_plans_rows_in_order_times_attempts(tmp_path: Path):
    rows = [{"id": "zeta", "prompt": "a", "answer": 1}, {"id": "alpha", "prompt": "b", "answer": 2}]
    planned = plan_trials(_config(_dataset(tmp_path / "ds", rows), tmp_path, n_attempts=2))
    assert all(p.python_task is not None and p.spec.task.kind == "python" for p in planned)
    assert [p.config.trial_name for p in planned] == [
        "zeta__loop-local__1",
        "alpha__loop-local__1",
        "zeta__loop-local__2",
        "alpha__loop-local__2",
    ]
    assert planned[1].python_task.data == {"answer": 2} and planned[1].config.dataset == "ds"
    assert planned[0].config.agent_timeout_sec == 600.0 * 4  # a Python task's 600 s, x4 for the local engine


def test_task_filter_applies_to_python_tasks(tmp_path: Path):
    planned = plan_trials(_config(REPO / "examples" / "math", tmp_path, task_names=["math-00[0-1]"]))
    assert [p.python_task.id for p in planned] == ["math-000", "math-001"]


def test_bad_rows_fail_the_plan_naming_each_row(tmp_path: Path):
    rows = [{"id": "a", "prompt": "x"}, {"id": "a", "prompt": "y"}, {"id": "b", "prompt": ""}]
    with pytest.raises(PlanError) as caught:
        plan_trials(_config(_dataset(tmp_path / "bad", rows), tmp_path))
    message = str(caught.value)
    assert "rows.jsonl: row 3: prompt: Value error, must not be empty" in message
    assert "rows.jsonl: row 2: id: duplicate id 'a'" in message


async def test_a_python_task_without_a_model_fails_with_a_clear_message(tmp_path: Path):
    """(The oracle answers a Python task with its reference answer: tests/cli/test_python_dataset_cli.py.)"""
    from evsys.engine.job import Job

    config = JobConfig(
        datasets=[REPO / "examples" / "math"],
        agents=[AgentSpec(name="nop")],
        jobs_dir=tmp_path,
        task_names=["math-000"],
    )
    result = await Job(config).run()
    [trial] = result.trials
    assert trial.cause == "agent_error" and "needs a model" in trial.failure.message
    assert "-a loop -m" in trial.failure.message and trial.reward is None
