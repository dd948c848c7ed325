"""The bundled example tasks: they load cleanly, the reference solution earns 1.0, doing nothing earns 0."""

from __future__ import annotations

import pytest
from task_bwrap_runner import BWRAP, run_task

from evsys.task import load_task, load_tasks
from evsys.task.check import check_tasks
from evsys.task.scaffold import scaffold_task

needs_bwrap = pytest.mark.skipif(BWRAP is None, reason="bubblewrap (bwrap) is not installed")
EXPECTED = {
    "create-file",
    "word-frequency",
    "fix-python-script",
    "multi-key-reward",
    "partial-credit",
    "nop-must-fail",
    "json-transform",
    "log-pipeline",
}


def _example_names(examples_dir):
    return sorted(p.name for p in (examples_dir / "tasks").iterdir() if p.is_dir())


def test_every_example_loads_without_errors_or_warnings(examples_dir):
    result = load_tasks(examples_dir / "tasks", require_solution=True)
    assert [str(e) for e in result.errors] == []
    assert {t.name for t in result.tasks} >= {f"evsys/{name}" for name in EXPECTED}  # Harbor's org/name
    assert result.by_name("create-file") is result.by_name("evsys/create-file")  # the short name picks it too
    for task in result.tasks:
        assert task.warnings == [], task.name
        env = task.environment  # only a base the host does not provide may need an image: no RUN & co
        assert env.image_reasons == ([env.base_reason] if env.needs_image else []), task.name
        assert task.config.task.description and task.config.metadata.get("difficulty"), task.name
        assert task.config.agent.timeout_sec <= 120 and task.config.verifier.timeout_sec <= 120


def test_tasks_check_has_nothing_to_say_about_the_examples_not_even_for_harbor(examples_dir):
    report = check_tasks(examples_dir / "tasks", require_solution=True)
    assert len(report.tasks) >= len(EXPECTED) and report.lines() == []


def test_the_dockerfile_examples_place_their_files(examples_dir):
    task = load_task(examples_dir / "tasks" / "word-frequency")
    assert task.environment.env["TOP_N"] == "5" and task.environment.env["DATA_DIR"] == "/app/data"
    assert [c.dst for c in task.environment.files] == ["/app/data/corpus.txt"]
    task = load_task(examples_dir / "tasks" / "nop-must-fail")
    assert task.environment.workdir == "/app"
    assert [c.dst for c in task.environment.files] == ["/app/etc"]


@pytest.mark.needs_sandbox
@needs_bwrap
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_oracle_reaches_1_and_doing_nothing_scores_0(examples_dir, tmp_path, name):
    task = load_task(examples_dir / "tasks" / name, require_solution=True)
    solved = run_task(task, tmp_path / "oracle", solve=True)
    assert solved["reward"] == 1.0, solved
    untouched = run_task(task, tmp_path / "nop", solve=False)
    assert all(value == 0 for value in untouched.values()), untouched


@pytest.mark.needs_sandbox
@needs_bwrap
def test_multi_key_and_partial_credit_rewards(examples_dir, tmp_path):
    solved = run_task(load_task(examples_dir / "tasks" / "multi-key-reward"), tmp_path / "mk", solve=False)
    assert set(solved) == {"reward", "correctness", "style"}
    task = load_task(examples_dir / "tasks" / "partial-credit")
    project = tmp_path / "pc" / "app" / "project"
    (project / "src" / "calc").mkdir(parents=True)
    (project / "README.md").write_text("# calc\n")
    (project / "VERSION").write_text("0.1.0\n")
    (project / "src" / "calc" / "core.py").write_text("def add(a, b):\n    return a - b\n")
    assert run_task(task, tmp_path / "pc", solve=False) == {"reward": 0.4}


def test_every_example_directory_is_a_task(examples_dir):
    assert len(_example_names(examples_dir)) >= 6
    for name in _example_names(examples_dir):
        load_task(examples_dir / "tasks" / name, require_solution=True)


@pytest.mark.needs_sandbox
@needs_bwrap
def test_scaffolded_task_reaches_1_with_its_solution(tmp_path):
    task = load_task(scaffold_task("fresh", tmp_path), require_solution=True)
    assert run_task(task, tmp_path / "oracle", solve=True) == {"reward": 1.0}
    assert run_task(task, tmp_path / "nop", solve=False) == {"reward": 0.0}
