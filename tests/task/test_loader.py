"""Loading task directories and datasets: required files, bad tasks next to good ones, dataset shapes."""

from __future__ import annotations

import pickle

import pytest

from evsys.task import DatasetNotFoundError, TaskLoadError, load_task, load_tasks


def test_a_valid_task_loads_with_absolute_paths(make_task):
    task = load_task(make_task("hello", instruction="Say hello.\n"))
    assert task.name == "hello" and task.instruction == "Say hello.\n"
    assert task.path.is_absolute() and task.tests_dir == task.path / "tests"
    assert task.solution_dir == task.path / "solution"
    assert task.config.agent.timeout_sec == 30


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"instruction": None}, "instruction.md: missing (it holds what the agent is told)"),
        ({"instruction": "  \n\n"}, "instruction.md: is empty"),
        ({"test_sh": None}, "tests/test.sh: missing (the verifier runs it to write the reward)"),
    ],
)
def test_missing_required_files_are_clear_errors(make_task, kwargs, expected):
    with pytest.raises(TaskLoadError) as info:
        load_task(make_task(**kwargs))
    assert str(info.value) == expected
    assert info.value.task_name == "demo"
    assert info.value.path.name == "demo"


def test_all_problems_of_a_task_are_reported_together(make_task):
    with pytest.raises(TaskLoadError) as info:
        load_task(make_task(instruction=None, test_sh=None, toml='[agent]\ntimeout_sec = "x"\n'))
    assert str(info.value).splitlines() == [
        "task.toml:agent.timeout_sec: expected a number, got 'x'",
        "instruction.md: missing (it holds what the agent is told)",
        "tests/test.sh: missing (the verifier runs it to write the reward)",
    ]


def test_missing_solution_is_a_warning_unless_the_oracle_needs_it(make_task):
    path = make_task(solve_sh=None)
    task = load_task(path)
    assert task.solution_dir is None
    assert task.warnings == [
        "solution/solve.sh: missing: the oracle agent needs it (its trials fail as task_invalid)"
    ]
    with pytest.raises(
        TaskLoadError,
        match=r"^solution/solve.sh: missing: the oracle agent needs it \(its trials fail as task_invalid\)$",
    ):
        load_task(path, require_solution=True)


def test_a_dataset_with_one_bad_task_returns_the_others_and_one_error(tmp_path, make_task):
    dataset = tmp_path / "dataset"
    for name in ("zeta", "alpha", "mid"):
        make_task(name, parent=dataset)
    make_task("broken", parent=dataset, toml="[task\nname = 1\n")
    (dataset / "notes").mkdir()  # not a task: ignored
    (dataset / "README.md").write_text("about this dataset")
    result = load_tasks(dataset)
    assert [t.name for t in result.tasks] == ["alpha", "mid", "zeta"]
    (error,) = result.errors
    assert error.task_name == "broken" and error.path == dataset / "broken"
    assert str(error).startswith("task.toml:1: syntax error: ")
    assert result.by_name("mid").name == "mid"


def test_a_task_directory_is_a_dataset_of_one(make_task):
    result = load_tasks(make_task("solo"))
    assert [t.name for t in result.tasks] == ["solo"] and result.errors == []


def test_a_subdirectory_missing_its_instruction_is_reported(tmp_path, make_task):
    dataset = tmp_path / "ds"
    make_task("good", parent=dataset)
    make_task("half", parent=dataset, toml=None, instruction=None)  # only tests/ and solution/
    result = load_tasks(dataset)
    assert [t.name for t in result.tasks] == ["good"]
    assert [e.task_name for e in result.errors] == ["half"]
    assert "instruction.md: missing (it holds what the agent is told)" in str(result.errors[0])


def test_duplicate_task_names_are_an_error(tmp_path, make_task):
    dataset = tmp_path / "ds"
    make_task("a", parent=dataset, toml='[task]\nname = "same"\n')
    make_task("b", parent=dataset, toml='[task]\nname = "same"\n')
    result = load_tasks(dataset)
    assert [t.path.name for t in result.tasks] == ["a"]
    (error,) = result.errors
    assert "task.toml:task.name: name 'same' is also used by" in str(error)


def test_missing_path_and_empty_directory_raise_clear_errors(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"dataset path '.*nowhere' does not exist"):
        load_tasks(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetNotFoundError, match=r"no task directories in '.*empty'"):
        load_tasks(tmp_path / "empty")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(DatasetNotFoundError, match="is not a directory"):
        load_tasks(tmp_path / "file.txt")


def test_load_task_on_a_missing_directory(tmp_path):
    with pytest.raises(TaskLoadError, match="is not a directory"):
        load_task(tmp_path / "gone")


def test_task_load_error_survives_pickling(make_task):
    with pytest.raises(TaskLoadError) as info:
        load_task(make_task(instruction=None))
    copy = pickle.loads(pickle.dumps(info.value))
    assert (copy.task_name, str(copy), copy.problems) == ("demo", str(info.value), info.value.problems)


def test_task_files_resolve_to_absolute_host_paths(make_task):
    task = load_task(
        make_task(
            dockerfile="FROM ubuntu\nWORKDIR /app\nCOPY data ./data\n", files={"environment/data/in.txt": "1"}
        )
    )
    (copy,) = task.environment.files
    assert copy.src.is_absolute() and (copy.src / "in.txt").read_text() == "1"
    assert copy.dst == "/app/data"


def test_a_cached_load_is_reused_until_a_file_of_the_task_changes(tmp_path):
    from evsys.task.loader import load_task_cached

    task_dir = tmp_path / "t"
    (task_dir / "tests").mkdir(parents=True)
    (task_dir / "instruction.md").write_text("first\n")
    (task_dir / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    first = load_task_cached(task_dir)
    assert load_task_cached(task_dir) is first  # parsed once
    (task_dir / "instruction.md").write_text("second, longer\n")
    assert load_task_cached(task_dir).instruction == "second, longer\n"
    (task_dir / "task.toml").write_text('[task]\nname = "renamed"\n')  # a new file counts too
    assert load_task_cached(task_dir).name == "renamed"
    shared = tmp_path / "shared-tests"
    shared.mkdir()
    (shared / "test.sh").write_text("#!/bin/bash\n")
    (task_dir / "tests" / "test.sh").unlink()
    (task_dir / "tests").rmdir()
    (task_dir / "tests").symlink_to(shared)  # a linked directory's files count as well
    before = load_task_cached(task_dir)
    (shared / "helper.py").write_text("x = 1\n")
    assert load_task_cached(task_dir) is not before
