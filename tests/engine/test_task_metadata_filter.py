"""`evsys run --filter KEY=VALUE`: tasks selected by their task.toml `[metadata]` (difficulty, category,
tags), glob values, lists matching when any element does."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from evsys.cli.main import app
from evsys.engine import JobConfig, PlanError, plan_trials
from evsys.task.select import metadata_selected, parse_filter

REPO = Path(__file__).resolve().parents[2]


def _toml(name: str, metadata: str) -> str:
    return (
        f'[task]\nname = "{name}"\n[metadata]\n{metadata}\n[agent]\ntimeout_sec = 60.0\n'
        '[verifier]\ntimeout_sec = 60.0\n[environment]\nworkdir = "/app"\nnetwork_mode = "no-network"\n'
    )


@pytest.fixture
def dataset(task_factory) -> Path:
    task_factory("easy-py", toml=_toml("easy-py", 'difficulty = "easy"\ntags = ["python", "files"]'))
    task_factory("hard-py", toml=_toml("hard-py", 'difficulty = "hard"\ntags = ["python3"]\ncategory = "x"'))
    task_factory("easy-sh", toml=_toml("easy-sh", 'difficulty = "easy"\ntags = ["shell"]'))
    task_factory("bare", toml=_toml("bare", ""))
    return task_factory.dataset


def planned(dataset: Path, *filters: str, names: tuple[str, ...] = ()) -> list[str]:
    config = JobConfig(
        datasets=[dataset], jobs_dir=dataset.parent / "jobs", job_name="j",
        task_filters=list(filters), task_names=list(names),
    )  # fmt: skip
    return [p.config.task_name for p in plan_trials(config)]


def test_a_metadata_filter_selects_tasks(dataset):
    assert planned(dataset) == ["bare", "easy-py", "easy-sh", "hard-py"]
    assert planned(dataset, "difficulty=easy") == ["easy-py", "easy-sh"]
    assert planned(dataset, "tags=python") == ["easy-py"]  # any element of a list; exact unless globbed
    assert planned(dataset, "tags=python*") == ["easy-py", "hard-py"]
    assert planned(dataset, "tags=py*", "difficulty=hard") == ["hard-py"]  # different keys: all must hold
    assert planned(dataset, "difficulty=easy", "difficulty=hard") == ["easy-py", "easy-sh", "hard-py"]
    assert planned(dataset, "difficulty=easy", names=("*-sh",)) == ["easy-sh"]  # with --task globs
    saved = JobConfig(datasets=[dataset], task_filters=["tags=py*"]).model_dump_json()
    assert JobConfig.model_validate_json(saved).task_filters == ["tags=py*"]  # config.json keeps it (resume)


def test_no_task_matching_a_filter_is_a_plan_error_naming_it(dataset):
    with pytest.raises(PlanError, match="no tasks matching category=y"):
        planned(dataset, "category=y")


def test_a_task_that_does_not_load_is_not_selected_by_a_filter(dataset):
    broken = dataset / "broken"
    broken.mkdir()
    (broken / "task.toml").write_text('[metadata]\ndifficulty = "easy"\n[agent]\ntimeout_sec = "soon"\n')
    assert "broken" in planned(dataset)  # without a filter: a task_invalid trial, as before
    assert planned(dataset, "difficulty=easy") == ["easy-py", "easy-sh"]


def test_filter_parsing():
    assert parse_filter(" tags = py* ").model_dump() == {"key": "tags", "pattern": "py*"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_filter("difficulty")
    assert metadata_selected({"flaky": True}, [parse_filter("flaky=true")])
    assert not metadata_selected(None, [parse_filter("flaky=*")])
    assert metadata_selected(None, [])


def test_evsys_run_filter_reaches_the_plan_and_refuses_a_malformed_one(tmp_path):
    runner = CliRunner()
    jobs = tmp_path / "jobs"
    tasks = str(REPO / "examples/tasks")
    bad = runner.invoke(app, ["run", tasks, "--filter", "easy", "--jobs-dir", str(jobs)])
    assert bad.exit_code == 2 and "KEY=VALUE" in bad.output
    none = runner.invoke(app, ["run", tasks, "--filter", "difficulty=impossible", "--jobs-dir", str(jobs)])
    assert none.exit_code == 2 and "no tasks matching difficulty=impossible" in none.output
    assert "--filter" in runner.invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output
