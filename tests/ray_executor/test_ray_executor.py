"""The Ray executor on a real local Ray cluster (head + two worker nodes): the same job directory and rewards
as the local executor, a worker node killed mid-job, the driver SIGKILLed and resumed, Ctrl-C stopping the
remote sandboxes, and the errors a user meets (a task no node can hold, Ray not installed, bad flags)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine_tasks import make_task

from evsys.engine import AgentSpec, ExecutorSpec, Job, JobConfig
from evsys.records import FailureCause

pytestmark = pytest.mark.slow

REWARD_ZERO = "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"
SLOW_SOLVE = "#!/bin/bash\nsleep {seconds}\necho ok > /app/out.txt\n"
EVSYS = [sys.executable, "-m", "evsys.cli.main"]


def _dataset(root: Path, n: int, *, solve: str | None = None, zero: int = 0) -> Path:
    dataset = root / "tasks"
    for i in range(n):
        parts = {"test": REWARD_ZERO} if i < zero else {}
        if solve is not None:
            parts["solve"] = solve
        make_task(dataset, f"t{i:02d}", **parts)
    return dataset


RAY = {"name": "ray"}


def _config(dataset: Path, jobs_dir: Path, **kw) -> JobConfig:
    base = {"agents": [AgentSpec(name="oracle")], "job_name": "j", "n_concurrent": 4}
    return JobConfig(datasets=[dataset], jobs_dir=jobs_dir, **{**base, **kw})


def _files(job_dir: Path) -> dict[str, bytes | None]:
    """Every file of the job directory; the content of those that do not hold timings or temp paths."""
    files: dict[str, bytes | None] = {}
    for path in sorted(job_dir.rglob("*")):
        if path.is_file():
            rel = str(path.relative_to(job_dir))
            stable = path.name == "config.json" or path.parent.name == "verifier"
            files[rel] = path.read_bytes() if stable and rel != "config.json" else None
    return files


@pytest.mark.parametrize("mode", ["tasks", "actors"])
async def test_forty_trials_across_two_nodes_match_the_local_executor(tmp_path: Path, ray_cluster, mode):
    dataset = _dataset(tmp_path, 10, zero=2)
    outcomes, jobs = {}, {}
    for executor in ("local", "ray"):
        config = _config(dataset, tmp_path / executor, n_attempts=4)
        options = {"mode": mode} if executor == "ray" else None
        job = Job(config.model_copy(update={"executor": ExecutorSpec(name=executor, options=options)}))
        result = await job.run()
        outcomes[executor] = {t.trial_name: (t.reward, t.failure, t.retries) for t in result.trials}
        jobs[executor] = job
        assert result.complete and result.n_done == 40
    assert outcomes["ray"] == outcomes["local"]
    assert sorted(r for r, _, _ in outcomes["ray"].values()).count(0.0) == 8  # 2 tasks x 4 attempts score 0
    assert _files(tmp_path / "ray" / "j") == _files(tmp_path / "local" / "j")
    per_node = jobs["ray"].executor.trials_per_node
    assert sum(per_node.values()) == 40 and len(per_node) == 2, per_node  # both worker nodes ran trials
    summary = json.loads((tmp_path / "ray" / "j" / "result.json").read_text())
    assert summary["mean_reward"] == pytest.approx(0.8) and summary["n_errors"] == 0


async def test_a_worker_node_killed_mid_job_reschedules_its_trials_once(tmp_path: Path, ray_cluster):
    dataset = _dataset(tmp_path, 12, solve=SLOW_SOLVE.format(seconds=4))
    victim = ray_cluster.workers[0]
    killed: list[int] = []

    async def kill_in_the_second_wave(result) -> None:
        # the first 4 trials are done, the next 4 (2 per node) started and have seconds to go: a node killed
        # now takes two running trials with it (a trial about to finish might still report back in time)
        if not killed and len(job.results) >= 4:
            killed.append(len(job.results))
            await asyncio.sleep(1.0)
            await asyncio.to_thread(ray_cluster.kill_worker, victim)

    job = Job(_config(dataset, tmp_path, executor=RAY), on_trial_done=kill_in_the_second_wave)
    try:
        result = await job.run()
    finally:
        ray_cluster.add_worker()  # the next tests get two nodes again (Ray starts nodes from the main thread)
    assert killed, "the node was never killed"
    planned = sorted(p.config.trial_name for p in job.planned)
    assert sorted(t.trial_name for t in result.trials) == planned  # every trial exactly once
    assert all(t.reward == 1.0 and t.failure is None for t in result.trials)
    rescheduled = [t for t in result.trials if t.retries]
    assert rescheduled, "no trial was running on the killed node"
    assert {r.cause for t in rescheduled for r in t.retries} == {FailureCause.WORKER_LOST}
    assert sum(len(t.retries) for t in rescheduled) == job.executor.worker_losses
    on_disk = sorted(p.parent.name for p in (tmp_path / "j").glob("*/result.json"))
    assert on_disk == planned and result.complete
    saved = json.loads((tmp_path / "j" / rescheduled[0].trial_name / "result.json").read_text())
    assert saved["retries"][0]["cause"] == "worker_lost"


def _results(job_dir: Path) -> list[Path]:
    return list(job_dir.glob("*/result.json"))


def test_a_driver_killed_mid_job_leaves_a_job_that_resume_completes(tmp_path: Path, ray_cluster):
    dataset = _dataset(tmp_path, 12, solve=SLOW_SOLVE.format(seconds=0.5))
    job_dir = tmp_path / "jobs" / "j"
    ray = ["--executor", "ray", "--ray-address", ray_cluster.address]
    first = [*EVSYS, "run", str(dataset), "-n", "2", "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "j"]
    driver = subprocess.Popen([*first, *ray], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while len(_results(job_dir)) < 3 and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert driver.poll() is None, driver.stderr.read().decode() if driver.stderr else ""
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    done_before = len(_results(job_dir))
    assert 3 <= done_before < 12
    resumed = subprocess.run(
        [*EVSYS, "run", "--resume", str(job_dir), *ray], capture_output=True, text=True, timeout=280
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert len(_results(job_dir)) == 12
    summary = json.loads((job_dir / "result.json").read_text())
    assert summary["complete"] and summary["n_done"] == 12 and summary["mean_reward"] == 1.0


def _sleepers(marker: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found]


async def test_cancelling_stops_the_remote_trials_and_their_sandboxes(tmp_path: Path, ray_cluster):
    marker = "sleep 987.654"  # what the trials run inside their sandboxes on the worker nodes
    dataset = _dataset(tmp_path, 2, solve=f"#!/bin/bash\n{marker}\n")
    job = Job(_config(dataset, tmp_path, executor=RAY))
    run = asyncio.create_task(job.run())
    deadline = time.monotonic() + 120
    while len(_sleepers(marker)) < 2 and time.monotonic() < deadline and not run.done():  # noqa: ASYNC110
        await asyncio.sleep(0.2)
    assert len(_sleepers(marker)) == 2  # positive control: both trials run in sandboxes right now
    job.cancel()
    result = await run
    assert [t.cause for t in result.trials] == [FailureCause.CANCELLED] * 2 and not result.complete
    deadline = time.monotonic() + 30
    while _sleepers(marker) and time.monotonic() < deadline:  # noqa: ASYNC110 (host processes)
        await asyncio.sleep(0.2)
    assert _sleepers(marker) == []
    for trial in result.trials:
        saved = json.loads((tmp_path / "j" / trial.trial_name / "result.json").read_text())
        assert saved["failure"]["cause"] == "cancelled"


async def test_a_task_no_node_can_hold_fails_with_what_it_asked_for(tmp_path: Path, ray_cluster):
    dataset = tmp_path / "tasks"
    toml = '[task]\nname = "big"\n[environment]\ncpus = 64\nnetwork_mode = "no-network"\n'
    make_task(dataset, "big", toml=toml)
    make_task(dataset, "small")
    result = await Job(_config(dataset, tmp_path, executor=RAY)).run()
    by_name = {t.task_name: t for t in result.trials}
    assert by_name["small"].reward == 1.0
    failure = by_name["big"].failure
    assert failure is not None and failure.cause == FailureCause.SANDBOX_FAILED
    assert "asks for 64 CPUs" in failure.message and "largest Ray node has 2 CPUs" in failure.message


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*EVSYS, "run", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.needs_sandbox
def test_the_cli_refuses_bad_executor_flags_with_a_usage_error(tmp_path: Path):
    dataset = str(_dataset(tmp_path, 1))
    unknown = _cli(dataset, "--executor", "nope", "--jobs-dir", str(tmp_path / "jobs"))
    assert (
        unknown.returncode == 2
        and "unknown executor 'nope'; available: local, processes, ray" in unknown.stderr
    )
    stray = _cli(dataset, "--ray-address", "auto", "--jobs-dir", str(tmp_path / "jobs"))
    assert stray.returncode == 2 and "--ray-address needs --executor ray" in stray.stderr
    mode = _cli(dataset, "--executor", "ray", "--ray-mode", "threads", "--jobs-dir", str(tmp_path / "jobs"))
    assert mode.returncode == 2 and "--ray-mode" in mode.stderr and "threads" in mode.stderr
    assert not (tmp_path / "jobs").exists()


def test_without_ray_installed_the_executor_names_the_extra(tmp_path: Path, monkeypatch):
    from evsys.engine.executors import ExecutorContext, ExecutorUnavailableError, create_executor
    from evsys.engine.store import JobStore

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if it were not installed
    with pytest.raises(ExecutorUnavailableError, match=r"pip install 'evsys\[ray\]'"):
        create_executor("ray", ExecutorContext(store=JobStore(tmp_path)))


def _programs_but_bwrap(tools: Path) -> Path:
    """A directory linking every program of /usr/bin except bubblewrap."""
    tools.mkdir()
    for program in Path("/usr/bin").iterdir():
        if program.name != "bwrap":
            (tools / program.name).symlink_to(program)
    assert (tools / "python3").exists() and not (tools / "bwrap").exists()
    return tools


async def test_a_node_without_the_sandbox_prerequisites_fails_its_trials_saying_what_to_fix(
    tmp_path: Path, ray_cluster
):
    dataset = _dataset(tmp_path, 1)
    tools = _programs_but_bwrap(tmp_path / "bin")  # the workers' PATH on this "node"
    options = {"runtime_env": {"env_vars": {"PATH": f"{Path(sys.executable).parent}:{tools}"}}}
    result = await Job(_config(dataset, tmp_path, executor={"name": "ray", "options": options})).run()
    [trial] = result.trials
    assert trial.cause == FailureCause.SANDBOX_FAILED
    message = trial.failure.message
    assert "cannot run 'local' sandboxes: bubblewrap (bwrap) is not installed" in message
    assert message.endswith("run `evsys doctor` on that node")
