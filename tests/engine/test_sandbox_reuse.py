"""Jobs keep sandboxes between trials of one environment and reset them: no trial sees another's files,
processes or solution, a trial that broke its sandbox gets it replaced, and nothing is left after the job."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from engine_tasks import make_task

from evsys.engine import Job, JobConfig

# The solve fails loudly when anything of an earlier trial is still there: files in /app, /tmp or /root,
# the uploaded solution or tests, a background process.
LEAK_CHECK_SOLVE = (
    "#!/bin/bash\n"
    "leaks=$(ls -d /app/out.txt /tmp/t /root/r /tests 2>/dev/null; pgrep -f 'sleep 3600')\n"
    'if [ -n "$leaks" ]; then echo "leaked: $leaks" > /app/out.txt; exit 0; fi\n'
    "echo ok > /app/out.txt; echo x > /tmp/t; echo y > /root/r; (setsid sleep 3600 &)\n"
)


def _config(dataset: Path, **kw) -> JobConfig:
    name = f"reuse-{secrets.token_hex(4)}"
    return JobConfig(datasets=[dataset], jobs_dir=dataset.parent / "jobs", job_name=name, **kw)


def processes_of(job_name: str) -> list[str]:
    """Host pids of processes in the job's sandbox cgroups."""
    found = []
    for pid_dir in Path("/proc").glob("[0-9]*"):
        try:
            if job_name in (pid_dir / "cgroup").read_text():
                found.append(pid_dir.name)
        except OSError:
            continue
    return found


@pytest.mark.needs_sandbox
async def test_trials_reuse_reset_sandboxes_and_see_nothing_of_each_other(tmp_path):
    dataset = make_task(tmp_path / "tasks", "leak-check", solve=LEAK_CHECK_SOLVE)
    config = _config(dataset, n_attempts=8, n_concurrent=2)
    result = await Job(config).run()
    assert [t.reward for t in result.trials] == [1.0] * 8, [t.failure for t in result.trials]
    reused = [t for t in result.trials if t.sandbox_reused]
    assert len(reused) == 6  # two sandboxes started, the other trials got a reset one
    assert processes_of(config.job_name) == []


@pytest.mark.needs_sandbox
async def test_reuse_can_be_switched_off(tmp_path):
    dataset = make_task(tmp_path / "tasks", "leak-check", solve=LEAK_CHECK_SOLVE)
    result = await Job(_config(dataset, n_attempts=3, n_concurrent=1, reuse_sandboxes=False)).run()
    assert [t.reward for t in result.trials] == [1.0] * 3
    assert not any(t.sandbox_reused for t in result.trials)


@pytest.mark.needs_sandbox
async def test_a_trial_whose_agent_timed_out_leaves_a_clean_sandbox_for_the_next(tmp_path):
    hang = "#!/bin/bash\necho ok > /app/out.txt\n(setsid sleep 3600 &)\nsleep 3600\n"
    make_task(tmp_path / "tasks", "a-hang", solve=hang, agent_timeout=1.0)
    make_task(tmp_path / "tasks", "b-leak-check", solve=LEAK_CHECK_SOLVE)  # the same environment
    config = _config(tmp_path / "tasks", n_concurrent=1)
    trials = {t.task_name: t for t in (await Job(config).run()).trials}
    assert trials["a-hang"].cause is not None and trials["a-hang"].cause.value == "agent_timeout"
    assert trials["b-leak-check"].sandbox_reused
    assert trials["b-leak-check"].reward == 1.0
    assert processes_of(config.job_name) == []


@pytest.mark.needs_process
@pytest.mark.parametrize(("flag", "reused"), [([], 2), (["--fresh-sandboxes"], 0)])
def test_cli_reuses_sandboxes_unless_told_not_to(tmp_path, flag, reused):
    dataset = make_task(tmp_path / "tasks", "leak-check", solve=LEAK_CHECK_SOLVE)
    args = [sys.executable, "-m", "evsys.cli.main", "run", str(dataset), "-a", "oracle", "-k", "3", "-n", "1"]
    args += ["--jobs-dir", str(tmp_path / "jobs"), "--job-name", "cli", *flag]
    done = subprocess.run(args, check=True, capture_output=True, text=True, timeout=120)
    assert (f"sandboxes: {reused} of 3 trials" in done.stdout) == bool(reused)
    results = [json.loads(p.read_text()) for p in (tmp_path / "jobs" / "cli").glob("*/result.json")]
    assert [r["rewards"]["reward"] for r in results] == [1.0] * 3
    assert sum(r["sandbox_reused"] for r in results) == reused
