"""Environment images: the cost of running on an image instead of the host rootfs, and of a cached build.

Three figures, each beside its baseline measured in the same run:
1. start + exec + stop of a local sandbox on a built image (debian:bookworm-slim + one RUN) vs the host rootfs
   (median of START_ROUNDS after one warm-up each, the order reversed every round). Target: within 1.2x.
2. 100 oracle trials at -n 8 of a task whose Dockerfile has a RUN (its image built before timing) vs the same
   task with no Dockerfile (host rootfs), through `Job.run()`, JOB_ROUNDS interleaved. Target: within 1.2x.
3. `evsys image build` of an unchanged, already built task: the whole command in a fresh process (what a user
   waits for; wall and CPU), beside importing evsys.images alone, and the cache lookup in process. Target:
   under 1 s.
The Debian base comes from the image cache (synthesised with mmdebstrap the first time, ~3 min).

Usage: `python bench/bench_images.py` or `python bench/run_all.py images`.
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

N_TRIALS = 100
N_CONCURRENT = 8
START_ROUNDS = 40
JOB_ROUNDS = 2
DOCKERFILE = "FROM debian:bookworm-slim\nRUN echo bench > /opt/bench.txt\n"
SOLVE = "#!/bin/bash\necho ok > /app/out.txt\n"
TEST = (
    "#!/bin/bash\n"
    'if [ "$(cat /app/out.txt)" = ok ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
)


def _write_task(root: Path, name: str, dockerfile: str | None) -> Path:
    task = root / name
    (task / "solution").mkdir(parents=True)
    (task / "tests").mkdir()
    toml = f'[task]\nname = "{name}"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n'
    (task / "task.toml").write_text(toml + '[environment]\nworkdir = "/app"\n')
    (task / "instruction.md").write_text("Write ok to /app/out.txt.\n")
    (task / "solution" / "solve.sh").write_text(SOLVE)
    (task / "tests" / "test.sh").write_text(TEST)
    if dockerfile:
        (task / "environment").mkdir()
        (task / "environment" / "Dockerfile").write_text(dockerfile)
    return task


async def _start_stop(variants: dict[str, dict]) -> dict[str, float]:
    """Median seconds of start + `true` + stop per variant, the variants interleaved round by round so load
    drift on a shared machine hits them alike, in an order reversed every round: a sandbox's teardown goes
    on in the kernel after `stop` returns, and always starting one variant right after the other charged
    that variant for it."""
    from evsys.records import SandboxSpec
    from evsys.sandbox import LocalSandbox

    times: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(START_ROUNDS + 1):
        order = list(variants) if i % 2 else list(reversed(variants))
        for name in order:
            spec = SandboxSpec(name=f"bench-img-{os.getpid()}-{name}-{i}", **variants[name])
            t0 = time.perf_counter()
            async with LocalSandbox(spec) as sb:
                await sb.exec("true")
            if i:  # the first round builds the cached layers
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(values) for name, values in times.items()}


async def _job(dataset: Path, jobs: Path, name: str) -> tuple[float, float]:
    from evsys.engine import AgentSpec, Job, JobConfig

    config = JobConfig(
        datasets=[dataset],
        agents=[AgentSpec(name="oracle")],
        jobs_dir=jobs,
        job_name=name,
        n_attempts=N_TRIALS,
        n_concurrent=N_CONCURRENT,
    )
    t0 = time.perf_counter()
    result = await Job(config).run()
    elapsed = time.perf_counter() - t0
    rewards = [t.reward or 0.0 for t in result.trials]
    return elapsed, sum(rewards) / len(rewards)


def _compile_evsys() -> None:
    """Write evsys's bytecode, as `pip install` does for an installed package: with PYTHONDONTWRITEBYTECODE
    set (some shells and CI images set it) an editable checkout would otherwise compile every module again
    in each fresh command, which is not what a user's installed evsys pays."""
    import compileall

    import evsys

    compileall.compile_dir(Path(evsys.__file__).parent, quiet=1)


def _cli_seconds(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of a command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{argv} failed: {done.stdout[-500:]} {done.stderr[-500:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


async def main() -> dict:
    """Run the three comparisons and print them."""
    from evsys.images import ImageService

    with tempfile.TemporaryDirectory(prefix="bench-images-") as tmp:
        root = Path(tmp)
        image_task = _write_task(root / "image-set", "image-task", DOCKERFILE)
        _write_task(root / "host-set", "host-task", None)
        image = (await ImageService(pull_policy="never").task_image(image_task, name="image-task")).spec
        starts = await _start_stop(
            {"host": {"workdir": "/app"}, "image": {"workdir": "/app", "image": image}}
        )
        jobs: dict[str, list[float]] = {"host": [], "image": []}
        rewards: dict[str, float] = {}
        for round_ in range(JOB_ROUNDS):  # interleaved, like the start figure
            for name in ("host", "image"):
                elapsed, rewards[name] = await _job(root / f"{name}-set", root / "jobs", f"{name}-{round_}")
                jobs[name].append(elapsed)
        python = sys.executable
        _compile_evsys()
        floor = _cli_seconds([python, "-c", "import evsys.images, evsys.task"])
        build = [python, "-m", "evsys.cli.main", "image", "build", str(image_task), "--pull", "never"]
        cached = [_cli_seconds(build) for _ in range(3)]
        t0 = time.perf_counter()
        again = await ImageService(pull_policy="never").task_image(image_task, name="image-task")
        lookup = time.perf_counter() - t0
    assert again.source == "cached"
    host_job, image_job = statistics.median(jobs["host"]), statistics.median(jobs["image"])
    f = {
        "start_stop_host_ms": starts["host"] * 1000,
        "start_stop_image_ms": starts["image"] * 1000,
        "start_stop_ratio": starts["image"] / starts["host"],
        "oracle_100_host_sec": host_job,
        "oracle_100_image_sec": image_job,
        "oracle_100_ratio": image_job / host_job,
        "oracle_rewards": rewards,
        "cached_image_build_wall_sec": statistics.median(c[0] for c in cached),
        "cached_image_build_cpu_sec": statistics.median(c[1] for c in cached),
        "cached_image_lookup_in_process_sec": lookup,
        "import_floor_wall_sec": floor[0],
        "import_floor_cpu_sec": floor[1],
        "image_layers": len(image.rootfs_layers),
    }
    print(
        f"start+exec+stop   host rootfs {f['start_stop_host_ms']:6.1f} ms"
        f"  image {f['start_stop_image_ms']:6.1f} ms  ratio {f['start_stop_ratio']:.2f}"
        f" (median of {START_ROUNDS}, interleaved, order reversed each round; target <= 1.2)"
    )
    print(
        f"100 oracle trials host rootfs {host_job:6.2f} s   image {image_job:6.2f} s"
        f"   ratio {f['oracle_100_ratio']:.2f} (median of {JOB_ROUNDS}; target <= 1.2); rewards {rewards}"
    )
    print(
        f"cached `evsys image build`: {f['cached_image_build_wall_sec']:.2f} s wall, "
        f"{f['cached_image_build_cpu_sec']:.2f} s CPU (target < 1 s); importing evsys.images alone "
        f"{floor[0]:.2f} s wall / {floor[1]:.2f} s CPU; the cache lookup itself {lookup * 1000:.0f} ms"
    )
    return f


if __name__ == "__main__":
    asyncio.run(main())
