"""Harbor itself (its own loader, from its virtualenv) loads evsys's example tasks unchanged and a fresh
`evsys tasks new` scaffold; what it skips, `evsys tasks check` warns about; and `harbor run` on the examples
through evsys's environment scores what `evsys run` does."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from harbor_runs import REPO_ROOT, harbor_env, run_harbor
from typer.testing import CliRunner

from evsys.cli.tasks import tasks_app

EXAMPLES = REPO_ROOT / "examples" / "tasks"

# Harbor's own local-dataset loading (`harbor run -p DIR` keeps the directories `Task.is_valid_dir` accepts):
# the name of each task it keeps, by directory
HARBOR_LOADS = """
import asyncio, json, sys
from pathlib import Path
from harbor.models.job.config import DatasetConfig
from harbor.models.task.task import Task
configs = asyncio.run(DatasetConfig(path=Path(sys.argv[1])).get_task_configs())
print(json.dumps({Path(c.path).name: Task(c.path).name for c in configs}))
"""


def harbor_loads(venv: Path, dataset: Path) -> dict[str, str]:
    """The tasks Harbor keeps of `dataset`: their `[task] name` (as Harbor reads it) by directory."""
    argv = [str(venv / "bin" / "python"), "-c", HARBOR_LOADS, str(dataset)]
    done = subprocess.run(argv, capture_output=True, text=True, env=harbor_env(), timeout=300, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_harbor_loads_the_examples_unchanged_and_a_fresh_scaffold(tmp_path, harbor):
    examples = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir())
    assert harbor_loads(harbor, EXAMPLES) == {name: f"evsys/{name}" for name in examples}
    scaffolds = tmp_path / "mine"
    for args in (["new", "my-task"], ["new", "acme/other"]):
        result = CliRunner().invoke(tasks_app, [*args, "--dir", str(scaffolds)])
        assert result.exit_code == 0, result.output
    assert harbor_loads(harbor, scaffolds) == {"my-task": "local/my-task", "other": "acme/other"}


def test_what_harbor_skips_tasks_check_names(tmp_path, harbor):
    dataset = tmp_path / "tasks"
    for name in ("create-file", "partial-credit", "word-frequency"):
        shutil.copytree(EXAMPLES / name, dataset / name)
    toml = dataset / "create-file" / "task.toml"
    toml.write_text(toml.read_text().replace('name = "evsys/create-file"', 'name = "create-file"'))
    shutil.rmtree(dataset / "partial-credit" / "environment")
    # Harbor keeps only the untouched copy: the bare name and the missing environment/ are skipped, silently
    assert harbor_loads(harbor, dataset) == {"word-frequency": "evsys/word-frequency"}
    result = CliRunner().invoke(tasks_app, ["check", str(dataset)])
    assert result.exit_code == 0, result.output  # evsys runs all three
    warnings = [line for line in result.output.splitlines() if "Harbor skips" in line]
    assert [w.split(": warning:")[0] for w in warnings] == [
        f"{dataset}/create-file/task.toml:task.name",
        f"{dataset}/partial-credit/environment",
    ]


@pytest.mark.slow
def test_harbor_run_scores_every_example_as_evsys_does(tmp_path, harbor):
    trials, done = run_harbor(harbor, EXAMPLES, tmp_path / "jobs", "examples", "-n", "4")
    examples = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir())
    got = {name: trial.reward for name, trial in trials.items()}
    assert got == dict.fromkeys(examples, 1.0), (
        done.stdout[-3000:],
        {n: t.exception for n, t in trials.items()},
    )
