"""Job directories for the viewer tests: a real oracle job, and hand-made jobs for the edge cases (token data,
prefix breaks, failures with tracebacks, hostile model output, symbolic links, a trial still running)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from evsys.engine import AgentSpec, Job, JobConfig
from evsys.engine.metrics import compute_metrics
from evsys.records import (
    AgentInfo,
    FailureCause,
    IntegrityFinding,
    JobResult,
    Observation,
    ObservationResult,
    PhaseTimings,
    StepMetrics,
    ToolCall,
    TrajectoryRecorder,
    TrialFailure,
    TrialResult,
)

REPO = Path(__file__).resolve().parents[2]
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
COMPLETION_IDS = [101, 2054, 318, 1234, 13, 50256, 77]
SECRET = "viewer-secret-marker"
FINDING = IntegrityFinding(
    kind="verifier_place_written", evidence=f"/logs/verifier/reward.txt {HOSTILE}", source="verifier"
)


def run_oracle_job(jobs_dir: Path, name: str = "oracle-job", agents=("oracle", "nop")) -> Path:
    """A real job: two of the bundled tasks, run by the given agents in local sandboxes."""
    tasks = [REPO / "examples/tasks/create-file", REPO / "examples/tasks/nop-must-fail"]
    config = JobConfig(
        datasets=tasks,
        agents=[AgentSpec(name=a) for a in agents],
        jobs_dir=jobs_dir,
        job_name=name,
        n_concurrent=2,
    )
    with ThreadPoolExecutor(1) as pool:  # its own thread: Playwright's sync API may own this one's loop
        pool.submit(asyncio.run, Job(config).run()).result()
    return jobs_dir / name


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _trial(name: str, task: str, reward: float | None, failure: TrialFailure | None, attempt=1):
    return TrialResult(
        trial_name=name,
        task_name=task,
        task_path=f"/tasks/{task}",
        dataset="tasks",
        agent="loop",
        model="local",
        attempt=attempt,
        rewards=None if reward is None else {"reward": reward},
        reward=reward,
        failure=failure,
        timing=PhaseTimings(sandbox_start=0.4, agent_setup=0.01, agent_run=3.2, verifier=0.2, total=3.9),
        finished_at="2026-11-24T01:00:05+00:00",
        started_at="2026-11-24T01:00:01+00:00",
    )


def _token_trajectory(name: str, reply: str):
    recorder = TrajectoryRecorder(name, AgentInfo(name="loop", model_name="local"))
    recorder.add("system", "You are an agent.")
    recorder.add("user", "Create /app/greeting.txt holding the greeting.")
    first = StepMetrics(
        prompt_tokens=5,
        completion_tokens=len(COMPLETION_IDS),
        prompt_token_ids=[1, 2, 3, 4, 5],
        completion_token_ids=COMPLETION_IDS,
        logprobs=[-0.01, -0.2, -1.5, -3.0, -0.05, -0.0001, -6.0],
        loss_mask=[1, 1, 1, 1, 1, 1, 0],
    )
    call = ToolCall(tool_call_id="call-1", function_name="bash", arguments={"command": "echo hi > /app/g"})
    recorder.add(
        "agent",
        reply,
        tool_calls=[call],
        observation=Observation(results=[ObservationResult(source_call_id="call-1", content="exit 0")]),
        metrics=first,
        reasoning_content="I should write the file.",
    )
    second = StepMetrics(
        prompt_tokens=9,
        completion_tokens=2,
        prompt_token_ids=[1, 2, 3, 9, 9, 9, 9, 9, 9],
        completion_token_ids=[5, 6],
        logprobs=[-0.3, -0.4],
        loss_mask=[1, 1],
        extends_previous=False,
        prefix_break_at=3,
    )
    recorder.add("agent", "done", metrics=second, proxy_call_index=1, latency_s=0.25, model_name="qwen-x")
    return recorder.build()


def make_handmade_job(jobs_dir: Path, name: str = "handmade") -> Path:
    """A job of four trials (one ok with token data and an integrity finding whose evidence holds markup,
    three failed) and one trial still running; the ok trial's agent/ holds a link to a file outside the job,
    and the job dir a linked trial dir."""
    config = JobConfig(
        datasets=[Path("tasks")], agents=[AgentSpec(name="loop", model="local")], jobs_dir=jobs_dir,
        job_name=name,
    )  # fmt: skip
    job_dir = jobs_dir / name
    _write(job_dir / "config.json", config.model_dump_json(indent=2))
    trials = [
        _trial("greet__loop-local__1", "greet", 1.0, None),
        _trial(
            "greet__loop-local__2", "greet", 0.0,
            TrialFailure(cause=FailureCause.AGENT_ERROR, message=f"RuntimeError: the agent broke\n{HOSTILE}"),
            attempt=2,
        ),
        _trial(
            "count__loop-local__1", "count", None,
            TrialFailure(cause=FailureCause.REWARD_MISSING, message="the test script wrote no reward file"),
        ),
        _trial(
            "count__loop-local__2", "count", 0.0,
            TrialFailure(cause=FailureCause.AGENT_TIMEOUT, message="the agent ran past its timeout of 60 s"),
            attempt=2,
        ),
    ]  # fmt: skip
    trials[0].integrity = [FINDING]
    for trial in trials:
        tdir = job_dir / trial.trial_name
        _write(tdir / "result.json", trial.model_dump_json(indent=2))
        _write(tdir / "config.json", json.dumps({"trial_name": trial.trial_name}))
        reply = HOSTILE if trial.attempt == 2 else "I will write the file."
        _write(tdir / "trajectory.json", _token_trajectory(trial.trial_name, reply).model_dump_json())
        _write(tdir / "verifier/test-stdout.txt", f"checking {trial.task_name}\n{HOSTILE}\n")
        _write(tdir / "agent/agent.log", "agent log line\n")
    _write(job_dir / "greet__loop-local__2/exception.txt", "Traceback (most recent call last):\n  boom\n")
    _write(job_dir / "greet__loop-local__1/verifier/reward.txt", "1\n")
    outside = jobs_dir.parent / "outside"
    _write(outside / "secret.txt", SECRET)
    _write(outside / "result.json", trials[0].model_copy(update={"trial_name": "linked"}).model_dump_json())
    (job_dir / "greet__loop-local__1/agent/leak.txt").symlink_to(outside / "secret.txt")
    (job_dir / "linked").symlink_to(outside)
    _write(job_dir / "running__loop-local__1/config.json", "{}")
    result = JobResult(
        job_name=name, job_dir=str(job_dir), started_at="2026-11-24T01:00:00+00:00",
        finished_at="2026-11-24T01:01:00+00:00", complete=False, n_planned=5, n_done=4,
        metrics=compute_metrics(trials, 2),
    )  # fmt: skip
    _write(job_dir / "result.json", result.model_dump_json(indent=2))
    return job_dir


def make_cancelled_job(jobs_dir: Path, name: str = "cancelled-job") -> Path:
    """The hand-made job as Ctrl-C leaves it: one trial recorded `cancelled`, result.json finished but not
    complete."""
    job_dir = make_handmade_job(jobs_dir, name)
    path = job_dir / "count__loop-local__2/result.json"
    trial = TrialResult.model_validate_json(path.read_text())
    trial.failure = TrialFailure(cause=FailureCause.CANCELLED, message="the job was cancelled")
    _write(path, trial.model_dump_json(indent=2))
    result = JobResult.model_validate_json((job_dir / "result.json").read_text())
    _write(job_dir / "result.json", result.model_copy(update={"n_cancelled": 1}).model_dump_json(indent=2))
    return job_dir


def start_viewer(path: Path, *args: str, cache_dir: Path | None = None) -> tuple[subprocess.Popen, str]:
    """`evsys view PATH --port 0 --no-open ARGS` in a subprocess; the process and the URL it printed. Its
    evsys cache is `cache_dir` (default: an empty one, so no local model's tokenizer is found)."""
    cache = cache_dir or Path(tempfile.mkdtemp(prefix="evsys-viewer-cache-"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "EVSYS_CACHE_DIR": str(cache)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "evsys.cli.main", "view", str(path), "--port", "0", "--no-open", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    line = proc.stdout.readline()
    match = re.search(r"http://127\.0\.0\.1:\d+/", line)
    if match is None:
        proc.kill()
        raise AssertionError(f"evsys view printed no URL: {line!r} {proc.stderr.read()!r}")
    return proc, match.group(0).rstrip("/")
