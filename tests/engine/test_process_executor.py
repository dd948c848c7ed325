"""The `processes` executor: a job's trials spread over worker processes on this machine.

Same results and files as the local executor; a worker killed mid-job fails (or reschedules) only its own
trials and the job goes on and resumes; cancelling (`job.cancel()`, Ctrl-C on `evsys run`) records the running
trials `cancelled` and leaves no worker behind; a model that lives in the process is refused up front."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine_tasks import make_task
from process_executor_agents import GATE_ENV

from evsys.engine import AgentSpec, Job, JobConfig

AGENT = "process_executor_agents:PidAgent"
SAFETY_TIMEOUT = 120  # seconds; only guards against a hung test, never asserts speed


def _dataset(root: Path, n: int) -> Path:
    dataset = root / "tasks"
    for i in range(n):
        make_task(dataset, f"t{i}")
    return dataset


def _config(tmp_path: Path, dataset: Path, executor: str, **kwargs) -> JobConfig:
    agent = kwargs.pop("agent", AgentSpec(name=AGENT))
    options = kwargs.pop("options", {"workers": 2})
    return JobConfig(
        datasets=[dataset],
        agents=[agent],
        jobs_dir=tmp_path / executor,
        job_name="j",
        n_concurrent=kwargs.pop("n_concurrent", 4),
        executor={"name": executor, "options": options if executor == "processes" else {}},
        **kwargs,
    )


def _files(job_dir: Path) -> set[str]:
    return {
        str(p.relative_to(job_dir)) for p in job_dir.rglob("*") if p.is_file() and p.name != "result.json"
    }


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") < 0


def _session_processes(session: int) -> str:
    return subprocess.run(["pgrep", "-a", "-s", str(session)], capture_output=True, text=True).stdout.strip()


async def _wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + SAFETY_TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.05)


async def _running_in_both_workers(job: Job, task: asyncio.Task, per_worker: int) -> list:
    """The job's workers once each runs `per_worker` trials whose agents have started."""

    def ready() -> bool:
        if task.done():
            return True
        workers = job.executor.workers if job.executor is not None else []
        running = [w for w in workers if len(w.trial_names) == per_worker]
        started = sum(1 for p in job.job_dir.glob("*/agent") if p.is_dir())
        return len(running) == 2 and started >= 2 * per_worker

    await _wait_for(ready, "trials running in both workers")
    assert not task.done(), task.result()
    return list(job.executor.workers)


@pytest.mark.needs_sandbox
@pytest.mark.slow
async def test_a_job_on_worker_processes_matches_the_local_executor(tmp_path: Path):
    dataset = _dataset(tmp_path, 5)
    make_task(dataset, "zero", test="#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n")
    results, events = {}, {"local": [], "processes": []}
    for executor in ("local", "processes"):
        job = Job(_config(tmp_path, dataset, executor), on_agent_event=events[executor].append)
        results[executor] = await job.run()
    local, spread = results["local"], results["processes"]
    outcome = {e: {t.trial_name: (t.reward, t.failure) for t in r.trials} for e, r in results.items()}
    assert outcome["local"] == outcome["processes"]
    assert outcome["local"]["zero__PidAgent__1"][0] == 0.0 and outcome["local"]["t0__PidAgent__1"][0] == 1.0
    assert _files(tmp_path / "local" / "j") == _files(tmp_path / "processes" / "j")
    assert spread.complete and spread.n_errors == 0
    # the local trials ran in this process; the others in worker processes, more than one of them
    assert {t.agent_metadata["pid"] for t in local.trials} == {os.getpid()}
    pids = {t.agent_metadata["pid"] for t in spread.trials}
    assert os.getpid() not in pids and len(pids) == 2
    # live agent events reach the driver from the workers as they do from in-process trials (besides the
    # trials' own phase events, which every trial sends)
    agent_events = [e for e in events["processes"] if e["type"] != "phase"]
    assert sorted(e["trial"] for e in agent_events) == sorted(t.trial_name for t in spread.trials)
    assert {e["pid"] for e in agent_events} == pids
    phases = {(e["trial"], e["data"]["phase"]) for e in events["processes"] if e["type"] == "phase"}
    wanted = {
        (e["trial"], phase) for e in agent_events for phase in ("sandbox_start", "agent_run", "verifier")
    }
    assert wanted <= phases
    on_disk = json.loads((tmp_path / "processes" / "j" / "t0__PidAgent__1" / "result.json").read_text())
    assert on_disk["reward"] == 1.0 and on_disk["agent_metadata"]["pid"] in pids


@pytest.mark.parametrize("losses", [0, 3], ids=["fails-its-trials", "reschedules-its-trials"])
@pytest.mark.slow
async def test_a_killed_worker_affects_only_its_own_trials_and_the_job_resumes(tmp_path: Path, losses: int):
    dataset = _dataset(tmp_path, 6)
    gate = tmp_path / "go"
    agent = AgentSpec(name=AGENT, kwargs={"seconds": 0})
    config = _config(
        tmp_path, dataset, "processes", agent=agent, options={"workers": 2, "max_worker_losses": losses}
    )
    # the agents of the first trials wait for the gate: both workers are busy when one is killed
    os.environ[GATE_ENV] = str(gate)
    try:
        job = Job(config)
        task = asyncio.create_task(job.run())
        victim, survivor = await _running_in_both_workers(job, task, per_worker=2)
        victims = set(victim.trial_names.values())
        os.kill(victim.pid, signal.SIGKILL)
        await _wait_for(lambda: victim.lost is not None, "the worker's loss to be noticed")
        gate.write_text("go")
        result = await asyncio.wait_for(task, SAFETY_TIMEOUT)
    finally:
        os.environ.pop(GATE_ENV, None)
    by_name = {t.trial_name: t for t in result.trials}
    assert len(by_name) == 6
    others = set(by_name) - victims
    assert all(by_name[n].failure is None and by_name[n].reward == 1.0 for n in others)
    assert all(not by_name[n].retries for n in others)  # the survivor's trials never noticed
    if losses == 0:
        for name in victims:
            failure = by_name[name].failure
            assert failure is not None and failure.cause == "worker_lost"
            assert f"worker process {victim.pid} was killed by SIGKILL" in failure.message
        resumed = await Job.resume(config.job_dir, retry_errors=True).run()
        assert resumed.complete and resumed.n_errors == 0
        assert {t.trial_name for t in resumed.trials if t.reward == 1.0} == set(by_name)
    else:
        for name in victims:
            trial = by_name[name]
            assert trial.failure is None and trial.reward == 1.0
            assert [r.cause for r in trial.retries] == ["worker_lost"]
            assert f"worker process {victim.pid} was killed by SIGKILL" in trial.retries[0].message
        assert result.complete
    assert not _alive(victim.pid) and not _alive(survivor.pid)  # the job closed its workers


@pytest.mark.slow
async def test_cancelling_the_job_records_its_running_trials_cancelled_and_stops_the_workers(tmp_path: Path):
    dataset = _dataset(tmp_path, 6)
    agent = AgentSpec(name=AGENT, kwargs={"seconds": 600})
    config = _config(tmp_path, dataset, "processes", agent=agent)
    job = Job(config)
    task = asyncio.create_task(job.run())
    workers = await _running_in_both_workers(job, task, per_worker=2)
    running = {name for w in workers for name in w.trial_names.values()}
    job.cancel()
    result = await asyncio.wait_for(task, SAFETY_TIMEOUT)
    assert {t.trial_name for t in result.trials} == running
    assert all(t.failure is not None and t.cause == "cancelled" for t in result.trials)
    assert result.n_cancelled == 4 and not result.complete
    for name in running:  # recorded in the job directory, where a resume finds it
        on_disk = json.loads((config.job_dir / name / "result.json").read_text())
        assert on_disk["failure"]["cause"] == "cancelled"
    assert not any(_alive(w.pid) for w in workers)


@pytest.mark.needs_process
@pytest.mark.slow
def test_ctrl_c_on_evsys_run_cancels_the_workers_trials_and_names_the_executor_to_resume(tmp_path: Path):
    dataset = _dataset(tmp_path, 4)
    jobs = tmp_path / "jobs"
    job_dir = jobs / "ctrl-c"
    args = [
        sys.executable,
        "-m",
        "evsys.cli.main",
        "run",
        str(dataset),
        "-a",
        AGENT,
        "--agent-kwarg",
        "seconds=600",
    ]
    args += ["-n", "4", "--jobs-dir", str(jobs), "--job-name", "ctrl-c", "--executor", "processes"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "EVSYS_SANDBOX_DIR": str(tmp_path / "scratch"),
    }
    # its own session, like a shell's foreground job: the terminal's SIGINT goes to every process of it
    proc = subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + SAFETY_TIMEOUT
        while len(list(job_dir.glob("*/agent"))) < 4 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # let the agents get going (not a speed assertion)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=SAFETY_TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, stderr
    assert f"evsys run --resume {job_dir} --executor processes" in stderr
    results = [json.loads(p.read_text()) for p in job_dir.glob("*/result.json")]
    assert len(results) == 4 and all(r["failure"]["cause"] == "cancelled" for r in results)
    deadline = time.monotonic() + SAFETY_TIMEOUT  # helpers that exit once their parent is gone may lag
    while (leftover := _session_processes(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not leftover, f"processes of the job's session survived: {leftover}"


async def test_a_model_that_runs_in_the_process_is_refused_before_anything_starts(tmp_path: Path):
    dataset = _dataset(tmp_path, 1)
    agent = AgentSpec(name="loop", model="local:/models/tiny")
    config = _config(tmp_path, dataset, "processes", agent=agent)
    with pytest.raises(
        ValueError, match=r"cannot run in-process models \(local:/models/tiny\).*--executor local"
    ):
        await Job(config).run()
    assert not config.job_dir.exists()


@pytest.mark.needs_process
def test_evsys_run_refuses_a_local_model_on_worker_processes_with_a_usage_error(tmp_path: Path):
    dataset = _dataset(tmp_path, 1)
    args = [
        sys.executable,
        "-m",
        "evsys.cli.main",
        "run",
        str(dataset),
        "-a",
        "loop",
        "-m",
        "local:/models/tiny",
    ]
    args += ["--executor", "processes", "--jobs-dir", str(tmp_path / "jobs"), "--no-model-probe"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cli = subprocess.run(args, capture_output=True, text=True, timeout=SAFETY_TIMEOUT, env=env)
    assert cli.returncode == 2 and "cannot run in-process models (local:/models/tiny)" in cli.stderr
    assert not (tmp_path / "jobs").exists()


def test_evsys_run_picks_worker_processes_only_for_wide_model_driven_jobs_on_enough_cores(
    tmp_path: Path, monkeypatch
):
    from evsys.cli.executor_flags import ExecutorFlags, automatic_executor
    from evsys.engine.executors import processes

    def job(*agents: AgentSpec, n: int = 256) -> JobConfig:
        return JobConfig(datasets=[tmp_path], agents=list(agents), jobs_dir=tmp_path, n_concurrent=n)

    http = AgentSpec(name="loop", model="vllm:m", base_url="http://127.0.0.1:9/v1")
    wide = job(http)
    monkeypatch.setattr(processes, "usable_cores", lambda: 8)
    assert automatic_executor(wide, ExecutorFlags()).executor.name == "processes"
    assert automatic_executor(wide, ExecutorFlags(name="local")).executor.name == "local"  # named: kept
    for narrow_or_not_http in (
        job(http, n=64),
        job(AgentSpec(name="loop", model="local:/models/tiny")),  # in-process: stays in this process
        job(http, AgentSpec(name="oracle")),  # not every trial waits on a model
        job(AgentSpec(name="loop", model="vllm:m", env={"TOKEN": "secret"})),  # values stay in this process
    ):
        assert automatic_executor(narrow_or_not_http, ExecutorFlags()).executor.name == "local"
    monkeypatch.setattr(processes, "usable_cores", lambda: 2)  # measured: no gain on 2 cores
    assert automatic_executor(wide, ExecutorFlags()).executor.name == "local"


@pytest.mark.needs_process
def test_workers_flag_needs_the_processes_executor(tmp_path: Path):
    dataset = _dataset(tmp_path, 1)
    args = [sys.executable, "-m", "evsys.cli.main", "run", str(dataset), "--workers", "2"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cli = subprocess.run(
        [*args, "--jobs-dir", str(tmp_path / "jobs")], capture_output=True, text=True, timeout=60, env=env
    )
    assert cli.returncode == 2 and "--workers needs --executor processes" in cli.stderr
    assert not (tmp_path / "jobs").exists()
