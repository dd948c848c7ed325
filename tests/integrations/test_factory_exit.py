"""A trainer's environment factory left open when its script ends still finishes its job: the episode it
started is verified and recorded and the job's result.json says `complete` (before, the exit-time close ran
after the interpreter had stopped its thread pools and raised `cannot schedule new futures after interpreter
shutdown`). Unknown task names are refused, naming the known ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evsys.integrations.episodes import EpisodeRunner

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "examples" / "tasks" / "create-file"
OPENENV_SITE = REPO / ".openenv-site"  # OpenEnv 0.10 lives apart (see test_openenv.py)
GOOD = "printf 'Hello from evsys!\\\\n' > /app/greeting.txt"

SCRIPT = """
import sys
from evsys.integrations.{module} import {factory}
factory = {factory}(sys.argv[1], jobs_dir=sys.argv[2], job_name="left-open")
{body}
print("leaving without close()", flush=True)
"""
TRL_BODY = """
env = factory()
env.reset(task="create-file")
print(env.bash(command="{good}; cat /app/greeting.txt"))
"""
OPENENV_BODY = """
session = factory.create("create-file", seed=0, episode_id="ep-1")
session.call_tool("bash", {{"command": "{good}"}})
"""


@pytest.mark.parametrize(
    ("module", "factory", "body"),
    [("trl", "EnvironmentFactory", TRL_BODY), ("openenv", "EvsysSessionFactory", OPENENV_BODY)],
)
def test_a_factory_left_open_at_exit_finishes_its_job(tmp_path: Path, module: str, factory: str, body: str):
    path = [str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    if module == "openenv":
        if not (OPENENV_SITE / "openenv").is_dir():
            pytest.skip(f"{OPENENV_SITE} is missing: scripts/bootstrap.sh makes it")
        path.insert(0, str(OPENENV_SITE))
    script = SCRIPT.format(module=module, factory=factory, body=body.format(good=GOOD))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(TASK), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "cannot schedule new futures" not in proc.stderr
    job = json.loads((tmp_path / "left-open" / "result.json").read_text())
    assert job["complete"] is True and job["n_done"] == 1, (job, proc.stderr[-3000:])
    trials = [p for p in (tmp_path / "left-open").iterdir() if (p / "result.json").is_file()]
    assert len(trials) == 1
    trial = json.loads((trials[0] / "result.json").read_text())
    assert trial["reward"] == 1.0, (trial["failure"], proc.stdout)  # the episode the script left was verified


def test_an_unknown_task_name_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    runner = EpisodeRunner(TASK, jobs_dir=tmp_path, job_name="names")
    try:
        with pytest.raises(ValueError, match=r"no task named 'create-fil' \(did you mean 'create-file'\?\)"):
            runner.require_tasks(["create-fil"])
    finally:
        runner.close()


def test_a_name_that_is_no_dataset_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="neither a task directory"):
        EpisodeRunner(str(tmp_path / "no-such-tasks"), jobs_dir=tmp_path)
