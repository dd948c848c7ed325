"""How long the viewer takes to read a large job, beside plain JSON reads of the same files.

A synthetic job of N_TRIALS trials (result.json each, 0/1 rewards, some failures) is written once; then:
- baseline: open + `json.loads` of every trial's result.json (the least any reader must do);
- load_job: what `evsys jobs show` and the viewer do (no-symlink opens, pydantic validation, metrics);
- GET /api/jobs/<job>: the job page's request, JSON encoding included (first read, then a cached re-read
  of the finished job).

Usage: `python bench/bench_viewer.py` or `python bench/run_all.py viewer`.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

N_TRIALS = 2000
REPEATS = 3


def _make_job(root: Path) -> Path:
    from evsys.engine import AgentSpec, JobConfig
    from evsys.records import FailureCause, JobResult, TrialFailure, TrialResult

    agents = [AgentSpec(name="oracle")]
    config = JobConfig(datasets=[Path("tasks")], agents=agents, jobs_dir=root, job_name="big")
    job_dir = root / "big"
    job_dir.mkdir(parents=True)
    (job_dir / "config.json").write_text(config.model_dump_json())
    for i in range(N_TRIALS):
        name = f"task-{i // 4}__oracle__{i % 4 + 1}"
        failure = TrialFailure(cause=FailureCause.AGENT_TIMEOUT, message="timeout") if i % 10 == 0 else None
        trial = TrialResult(
            trial_name=name, task_name=f"task-{i // 4}", task_path="/t", dataset="tasks", agent="oracle",
            attempt=i % 4 + 1, rewards={"reward": float(i % 3 == 0)}, reward=float(i % 3 == 0),
            failure=failure, finished_at="2026-11-24T01:00:05+00:00",
        )  # fmt: skip
        (job_dir / name).mkdir()
        (job_dir / name / "result.json").write_text(trial.model_dump_json())
    result = JobResult(job_name="big", job_dir=str(job_dir), finished_at="2026-11-24T02:00:00+00:00")
    (job_dir / "result.json").write_text(result.model_dump_json())
    return job_dir


def _best(fn) -> float:
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times) * 1000


async def main() -> dict:
    """Run the benchmark and print a table; return the figures (ms)."""
    from starlette.testclient import TestClient

    from evsys.viewer.app import JobSource, create_app
    from evsys.viewer.jobdata import load_job

    with tempfile.TemporaryDirectory() as tmp:
        job_dir = _make_job(Path(tmp))

        def baseline() -> None:
            for path in job_dir.glob("*/result.json"):
                json.loads(path.read_bytes())

        def api_cold() -> None:
            client = TestClient(create_app(JobSource(job_dir.parent)), base_url="http://127.0.0.1")
            assert client.get("/api/jobs/big").status_code == 200

        source = JobSource(job_dir.parent)
        warm = TestClient(create_app(source), base_url="http://127.0.0.1")
        warm.get("/api/jobs/big")
        figures = {
            "trials": N_TRIALS,
            "baseline_json_reads_ms": _best(baseline),
            "load_job_ms": _best(lambda: load_job(job_dir)),
            "api_job_first_ms": _best(api_cold),
            "api_job_cached_ms": _best(lambda: warm.get("/api/jobs/big")),
        }
    for key, value in figures.items():
        print(f"{key:28} {value:10.1f}" if isinstance(value, float) else f"{key:28} {value:10}")
    figures["per_trial_load_job_us"] = figures["load_job_ms"] * 1000 / N_TRIALS
    print(f"{'per trial (load_job)':28} {figures['per_trial_load_job_us']:10.1f} us")
    return figures


if __name__ == "__main__":
    import asyncio

    asyncio.run(main())
