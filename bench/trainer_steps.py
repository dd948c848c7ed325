"""A trainer's steps in one process: K jobs of the same N trials one after another over one sandbox pool.

Run by bench/bench_concurrency.py in its own process (so its CPU is its own): each step is a `Job` of the loop
agent over `dataset` against the scripted model at `base_url`, `-n` N, with `sandboxes=pool`
(docs/scale.md, "A trainer's steps on one sandbox pool"), and one model client lent to every step, as a
trainer passes its client to `run_rollouts`; the first step starts its sandboxes, the next ones take those
the last step released, reset. Prints one JSON line per step: wall seconds, the process's CPU
seconds (all threads), mean reward, errors, and how many trials ran on a reused sandbox.

Usage: `python bench/trainer_steps.py DATASET JOBS_DIR BASE_URL N K [MAX_IDLE]` (MAX_IDLE: how many released
sandboxes the pool keeps, default N; 0 keeps none, so every step starts its sandboxes: the figure without
reuse).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path


async def steps(dataset: Path, jobs: Path, base_url: str, n: int, k: int, max_idle: int) -> None:
    """Run the K steps, printing each one's figures."""
    from evsys.engine import AgentSpec, Job, JobConfig
    from evsys.model.spec import create_model_client
    from evsys.rollouts import BorrowedModelClient
    from evsys.sandbox.pool import SandboxPool

    agent = AgentSpec(name="loop", model="vllm:scripted", base_url=base_url)
    client = create_model_client(agent.model or "", base_url=base_url)
    lent = BorrowedModelClient(client)
    async with SandboxPool.for_backend("local", max_idle=max_idle) as pool:
        for step in range(k):
            config = JobConfig(
                datasets=[dataset],
                agents=[agent],
                n_concurrent=n,
                jobs_dir=jobs,
                job_name=f"step-{dataset.name}-{n}-keep{max_idle}-{step}",
            )
            cpu, wall = time.process_time(), time.perf_counter()
            result = await Job(config, model_client_factory=lambda _: lent, sandboxes=pool).run()
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            reused = sum(1 for trial in result.trials if trial.sandbox_reused)
            line = {"step": step, "wall": wall, "cpu": cpu, "reward": result.mean_reward}
            print(json.dumps({**line, "errors": result.n_errors, "reused": reused}), flush=True)
    await client.aclose()


if __name__ == "__main__":
    data, jobs_dir, url, count, repeats = sys.argv[1:6]
    keep = int(sys.argv[6]) if len(sys.argv) > 6 else int(count)
    asyncio.run(steps(Path(data), Path(jobs_dir), url, int(count), int(repeats), keep))
