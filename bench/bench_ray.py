"""200 trivial oracle trials on a local Ray cluster (both Ray modes) beside the local executor, in one run.

The cluster is started by the bench on this machine, loopback only: a head that runs no trials and two worker
nodes with 2 CPUs each, so four trials run at once; the local executor runs the same 200 trials at -n 4. Each
Ray mode first runs a warm-up job (Ray starts its worker processes, which import evsys), then:
- throughput: 200 trials at -n 4, seconds for the whole job, per mode, beside the local executor;
- per-trial overhead: 30 trials one at a time (-n 1), (Ray seconds - local seconds) / 30 — what one trial
  pays for going through Ray (submit, ship the spec, scratch job dir, tar back, import) plus, for the actor
  mode, starting its per-job actors; and the same once the first trial came back (steady state: the time
  between the first and the last trial's return / 29). ROUNDS rounds alternating the three, medians.
  Target: < 20 ms.
Task: solve.sh `echo ok > /app/out.txt`; test.sh writes reward 1 when the file holds `ok`.

Usage: `python bench/bench_ray.py` or `python bench/run_all.py ray` (needs the `ray` extra).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import time
from pathlib import Path

N_TRIALS = 200
N_CONCURRENT = 4
N_SEQUENTIAL = 30
TARGET_MS = 20.0
ROUNDS = int(os.environ.get("EVSYS_BENCH_ROUNDS", "3"))  # of the sequential runs; the median is reported
MODES = (("local", None), ("ray_tasks", "tasks"), ("ray_actors", "actors"))
NODE_ARGS = {"num_cpus": 2, "object_store_memory": 80 * 1024 * 1024}


def write_task(root: Path) -> Path:
    """The trivial task directory under `root` (the engine bench's task)."""
    from bench_engine import _write_task

    return _write_task(root)


def start_cluster():
    """A head without CPUs and two 2-CPU worker nodes on loopback; the driver connected."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # loopback addresses only
    src = str(Path(__file__).resolve().parents[1] / "src")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
    import ray
    from ray.cluster_utils import Cluster

    head = {"num_cpus": 0, "object_store_memory": 80 * 1024 * 1024, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    for _ in range(2):
        cluster.add_node(**NODE_ARGS)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    return cluster


async def run_job(root: Path, dataset: Path, name: str, n: int, concurrent: int, mode: str | None):
    """Seconds for `n` trials through Job.run() (local executor when `mode` is None), and the seconds per
    trial once the first trial came back (what a long job pays per trial, without the actors' start)."""
    from evsys.engine import AgentSpec, Job, JobConfig

    config = JobConfig(
        datasets=[dataset],
        agents=[AgentSpec(name="oracle")],
        n_attempts=n,
        n_concurrent=concurrent,
        jobs_dir=root / "jobs",
        job_name=name,
        executor={"name": "local"} if mode is None else {"name": "ray", "options": {"mode": mode}},
    )
    done: list[float] = []
    job = Job(config, on_trial_done=lambda _r: done.append(time.perf_counter()))
    started = time.perf_counter()
    result = await job.run()
    elapsed = time.perf_counter() - started
    assert result.n_done == n and result.mean_reward == 1.0, (name, result.n_errors)
    return elapsed, (done[-1] - done[0]) / (n - 1)


async def main() -> dict:
    """Run the benchmark and return its figures."""
    from bench_engine import _bench_root

    import evsys.engine  # noqa: F401  (import cost outside the timed region)

    root = _bench_root(".bench-ray-")
    started = time.perf_counter()
    cluster = start_cluster()  # in the main thread: Ray installs signal handlers for its nodes
    cluster_sec = time.perf_counter() - started
    figures: dict = {"trials": N_TRIALS, "concurrency": N_CONCURRENT}
    figures["cluster_start_sec"] = round(cluster_sec, 1)
    try:
        dataset = write_task(root / "dataset")
        for mode in ("tasks", "actors"):
            warm, _ = await run_job(root, dataset, f"warm-{mode}", 8, 4, mode)
            figures[f"warmup_{mode}_sec"] = round(warm, 3)
        for label, mode in MODES:
            sec, _ = await run_job(root, dataset, f"many-{label}", N_TRIALS, N_CONCURRENT, mode)
            figures[f"{label}_sec"] = round(sec, 3)
        sequential: dict[str, list[float]] = {label: [] for label, _ in MODES}
        steady: dict[str, list[float]] = {label: [] for label, _ in MODES}
        for i in range(ROUNDS):  # alternated, so a burst of load on the shared machine hits every mode
            for label, mode in MODES:
                sec, per_trial = await run_job(root, dataset, f"one-{label}-{i}", N_SEQUENTIAL, 1, mode)
                sequential[label].append(round(sec, 3))
                steady[label].append(per_trial * 1000)
        for label, runs in sequential.items():
            figures[f"{label}_sequential_sec"] = statistics.median(runs)
            figures[f"{label}_sequential_rounds_sec"] = runs
            figures[f"{label}_steady_ms_per_trial"] = round(statistics.median(steady[label]), 1)
    finally:
        import ray

        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    local_one = figures["local_sequential_sec"]
    for label in ("ray_tasks", "ray_actors"):
        extra = (figures[f"{label}_sequential_sec"] - local_one) / N_SEQUENTIAL * 1000
        figures[f"{label}_overhead_ms_per_trial"] = round(extra, 1)
        steady_extra = figures[f"{label}_steady_ms_per_trial"] - figures["local_steady_ms_per_trial"]
        figures[f"{label}_steady_overhead_ms_per_trial"] = round(steady_extra, 1)
        figures[f"{label}_throughput_ratio"] = round(figures[f"{label}_sec"] / figures["local_sec"], 2)
    figures["target_overhead_ms"] = TARGET_MS
    print(f"Ray cluster (head + 2 workers x 2 CPUs, loopback) started in {cluster_sec:.1f} s")
    print(f"{N_TRIALS} trials at -n {N_CONCURRENT}:  local {figures['local_sec']:.3f} s", end="")
    for label in ("ray_tasks", "ray_actors"):
        print(f" | {label} {figures[f'{label}_sec']:.3f} s ({figures[f'{label}_throughput_ratio']}x)", end="")
    print(f"\n{N_SEQUENTIAL} trials one at a time: local {local_one:.3f} s", end="")
    for label in ("ray_tasks", "ray_actors"):
        seq, ms = figures[f"{label}_sequential_sec"], figures[f"{label}_overhead_ms_per_trial"]
        print(f" | {label} {seq:.3f} s (+{ms:.1f} ms/trial)", end="")
    print(
        f"\nonce the first trial is back, per trial: local {figures['local_steady_ms_per_trial']} ms", end=""
    )
    for label in ("ray_tasks", "ray_actors"):
        ms = figures[f"{label}_steady_overhead_ms_per_trial"]
        print(f" | {label} {figures[f'{label}_steady_ms_per_trial']} ms (+{ms} ms)", end="")
    print(f"\nper-trial overhead target: < {TARGET_MS:.0f} ms")
    return figures


if __name__ == "__main__":
    asyncio.run(main())
