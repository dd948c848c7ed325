"""Tinker's `EvsysRLDataset` takes every source `evsys run` takes (evsys.engine.sources): a task directory
given as a string, a loaded `TaskSet`, its `Task`s, a list of paths, a Harbor `dataset.toml` directory and a
registry dataset `NAME@VERSION`; each plans the tasks `evsys run` would run, and a dataset by name runs the
version it names (its verifier's rewards)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("tinker_cookbook.rl.rollouts", reason="tinker-cookbook is not installed (evsys[tinker])")

from test_dataset_registry import registry  # noqa: F401  (the fixture: a git repo and a registry file)
from test_tinker_envs import RENDERER, ScriptedPolicy
from tinker_cookbook.rl.rollouts import do_group_rollout

from evsys.engine.sources import TaskSourceError, tasks_on_disk
from evsys.integrations.tinker import EvsysRLDataset
from evsys.task.loader import load_tasks
from evsys.testing.tiny_model import DEMO_RECIPE, build_tiny_model

PLANNING_ONLY = "never-loaded/model"
EXAMPLE_TASKS = Path(__file__).resolve().parents[2] / "examples" / "tasks"
HARBOR_MANIFEST = """\
schema_version = "1.0"

[dataset]
name = "acme/two-of-three"
version = "1.0"

[[tasks]]
name = "evsys/create-file"

[[tasks]]
name = "evsys/json-transform"
"""


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return build_tiny_model(DEMO_RECIPE)


async def planned_names(tasks: object, jobs: Path) -> list[str]:
    """The task names of the dataset's builders, in the order it hands them out (planning loads no model:
    the model name only picks the renderer when an env is made)."""
    dataset = await EvsysRLDataset.create(
        tasks, model_name=PLANNING_ONLY, renderer_name=RENDERER, jobs_dir=jobs
    )
    async with dataset:
        return [builder.task.name for builder in dataset.builders]


def harbor_dataset(root: Path) -> Path:
    """A Harbor dataset directory of three example tasks whose `dataset.toml` lists two of them."""
    for name in ("create-file", "json-transform", "word-frequency"):
        shutil.copytree(EXAMPLE_TASKS / name, root / name)
    (root / "dataset.toml").write_text(HARBOR_MANIFEST)
    return root


async def test_every_form_of_a_task_directory_plans_what_evsys_run_runs(tmp_path: Path):
    """The examples as a string, a TaskSet, its Tasks and a list of paths plan the same tasks as a job over
    the directory; a Harbor manifest's directory plans the tasks it lists."""
    taskset = load_tasks(EXAMPLE_TASKS)
    expected = sorted(task.name for task in tasks_on_disk([EXAMPLE_TASKS]))
    forms = {
        "str": str(EXAMPLE_TASKS),
        "TaskSet": taskset,
        "Tasks": list(taskset.tasks),
        "paths": [task.path for task in taskset.tasks],
    }
    for form, tasks in forms.items():
        assert await planned_names(tasks, tmp_path / form) == expected, form

    harbor = harbor_dataset(tmp_path / "harbor-dataset")
    listed = ["evsys/create-file", "evsys/json-transform"]
    assert await planned_names(harbor, tmp_path / "harbor") == listed


async def test_a_missing_source_is_refused_naming_what_was_looked_for(tmp_path: Path):
    with pytest.raises(TaskSourceError, match="neither a task directory"):
        await planned_names(str(tmp_path / "no-such-tasks"), tmp_path)


@pytest.mark.needs_sandbox
async def test_a_dataset_by_name_runs_the_version_it_names(
    model_dir: Path,
    tmp_path: Path,
    registry: tuple[Path, Path, list[str]],  # noqa: F811
):
    """mini@1.0 and mini@2.0 from a registry file: the same two tasks, and beta's verifier scores 1 in the
    first and 0 in the second, as each episode's reward shows."""
    registry_file = registry[0]
    rewards = {}
    for version in ("1.0", "2.0"):
        dataset = await EvsysRLDataset.create(
            f"mini@{version}",
            model_name=str(model_dir),
            renderer_name=RENDERER,
            jobs_dir=tmp_path / version,
            group_size=1,
            registry_path=registry_file,
        )
        async with dataset:
            for builder in dataset.builders:
                group = await do_group_rollout(builder, ScriptedPolicy(model_dir, ["done"]))
                rewards[version, builder.task.name] = group.get_total_rewards()
    assert rewards == {
        ("1.0", "alpha"): [1.0],
        ("1.0", "beta"): [1.0],
        ("2.0", "alpha"): [1.0],
        ("2.0", "beta"): [0.0],
    }
