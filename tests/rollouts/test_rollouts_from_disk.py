"""`run_rollouts` takes what `evsys run` takes: a directory of task directories (as a string or a Path), one
task directory, loaded `Task`s; the oracle and nop agents need no model; a name that is neither a path nor
NAME@VERSION is refused with a message saying what was looked for."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evsys.engine.sources import TaskSourceError, task_source
from evsys.rollouts import run_rollouts
from evsys.task.loader import load_tasks


@pytest.fixture
def two_tasks(tmp_path: Path, examples_dir: Path) -> Path:
    """Two of the bundled example tasks, copied into a directory of their own."""
    root = tmp_path / "tasks"
    for name in ("create-file", "nop-must-fail"):
        shutil.copytree(examples_dir / "tasks" / name, root / name)
    return root


@pytest.mark.needs_sandbox
async def test_a_directory_of_tasks_given_as_a_string_rolls_out_with_the_oracle(two_tasks, tmp_path):
    groups = await run_rollouts(str(two_tasks), agent="oracle", num_samples=2, jobs_dir=tmp_path / "jobs")
    by_task = {g.task_id: g for g in groups}
    assert set(by_task) == {"evsys/create-file", "evsys/nop-must-fail"}  # the tasks' [task] names
    for group in groups:
        assert [t.attempt for t in group.trajectories] == [1, 2]
        assert group.n_errors == 0 and group.prompt  # the task's instruction
    assert by_task["evsys/create-file"].rewards == [1.0, 1.0]
    assert (tmp_path / "jobs").is_dir()


@pytest.mark.needs_sandbox
async def test_a_task_directory_path_and_loaded_tasks_with_nop(two_tasks, tmp_path):
    one = await run_rollouts(two_tasks / "create-file", agent="nop", jobs_dir=tmp_path / "a")
    assert [g.task_id for g in one] == ["evsys/create-file"] and one[0].rewards == [0.0]
    loaded = load_tasks(two_tasks)
    both = await run_rollouts(loaded, agent="nop", jobs_dir=tmp_path / "b")
    assert sorted(g.task_id for g in both) == ["evsys/create-file", "evsys/nop-must-fail"]
    listed = await run_rollouts(loaded.tasks, agent="nop", jobs_dir=tmp_path / "c")
    assert sorted(g.task_id for g in listed) == ["evsys/create-file", "evsys/nop-must-fail"]


async def test_an_agent_that_talks_to_a_model_still_needs_one(two_tasks, tmp_path):
    with pytest.raises(ValueError, match="talks to a model: pass model="):
        await run_rollouts(two_tasks, jobs_dir=tmp_path)


def test_a_missing_path_is_refused_naming_what_was_looked_for(tmp_path):
    with pytest.raises(TaskSourceError, match=r"neither a task directory.*pass a list"):
        task_source(str(tmp_path / "no-such-tasks"))
    with pytest.raises(TaskSourceError, match="not a mix"):
        task_source([tmp_path, "a prompt"])
