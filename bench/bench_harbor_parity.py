"""Harbor itself beside evsys on the parity set (tests/parity/tasks): each task's oracle reward, side by side,
and the wall time of the whole set on each.

Harbor 0.25 runs with its own `docker` environment (docker compose) against a private `dockerd` started here
(evsys.testing.dockerd, with NAT so the tasks that need the internet get it); evsys runs the same task
directories on `local` and on `docker` against the same daemon. The rewards must be equal: the script exits 1
when one differs. Harbor needs Python >= 3.12 (Debian 12 has 3.11): bench/harbor_rootfs.sh makes once, under
evsys's cache dir, an Ubuntu 24.04 root filesystem (python3.12, docker, compose v2) with harbor 0.25.0 in a
virtualenv, and runs Harbor inside it with bubblewrap, /tmp (the daemon's socket, the scratch dataset) at the
same path. Not part of `make test` or `make bench` (Harbor's install is heavy). Run it as root:

    PYTHONPATH=src .venv/bin/python bench/bench_harbor_parity.py [--backends local,docker] [--no-harbor]

The parity tasks build `FROM python:3.11-slim-bookworm`; no container registry is reachable here, so the image
evsys synthesises for that name is loaded into the daemon under it, for both systems' builds. Tasks
that only evsys can run (a custom agent) are left out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
PARITY = BENCH_DIR.parent / "tests" / "parity" / "tasks"
HARBOR = [str(BENCH_DIR / "harbor_rootfs.sh"), "harbor"]
EVSYS_ONLY = {"forger-stays-out"}  # scored with a custom agent, not the oracle
# Harbor 0.25's docker environment enforces `no-network` only through its egress-control sidecar, which it
# enables after a probe container from `alpine@sha256:...` (a registry pull) succeeds: where no registry is
# reachable it rejects every task or phase asking for no network. Tasks that say `no-network` only to stay
# off the network run here without it (on both systems); the network tasks keep it.
NETWORK_TASKS = {"network-phase-override"}
BASES = ("python:3.11-slim-bookworm",)


def primary(rewards: dict[str, float] | None) -> float | None:
    """Harbor's and evsys's primary reward: the `reward` key, else the mean of the keys."""
    if not rewards:
        return None
    return rewards["reward"] if "reward" in rewards else sum(rewards.values()) / len(rewards)


def dataset_copy(root: Path, only: list[str]) -> Path:
    """The parity tasks both systems can run (or the named ones), copied to a scratch dataset. Harbor 0.25
    wants `[task] name` as `org/name`: the copies are named `parity/<name>` (for both systems)."""
    dataset = root / "parity"
    for task in sorted(PARITY.iterdir()):
        if task.is_dir() and task.name not in EVSYS_ONLY and (not only or task.name in only):
            shutil.copytree(task, dataset / task.name)
            toml = dataset / task.name / "task.toml"
            text = re.sub(r'(?m)^name = "', 'name = "parity/', toml.read_text(), count=1)
            if task.name not in NETWORK_TASKS:
                text = text.replace('network_mode = "no-network"\n', "")
            toml.write_text(text)
    return dataset


async def load_bases(host: str) -> None:
    """The parity tasks' base images, as evsys has them (pulled or synthesised), loaded into the daemon."""
    from evsys.images import ImageService
    from evsys.sandbox.docker import api

    service = ImageService()
    for ref in BASES:
        stored, _ = await service.ensure_ref(ref)
        spec = await service.storage.spec(stored)
        await asyncio.to_thread(api.load_image, spec.source, ref)


def run_harbor(dataset: Path, jobs: Path, host: str) -> tuple[dict[str, float | None], float]:
    """Harbor's oracle on every task (docker environment); rewards by task name and wall seconds. The
    network tasks run in a job of their own: Harbor rejects a task whose network it cannot enforce by ending
    the whole job."""
    rewards: dict[str, float | None] = {}
    wall = 0.0
    groups = {"harbor-parity": [t.name for t in dataset.iterdir() if t.name not in NETWORK_TASKS]}
    groups["harbor-parity-network"] = [t.name for t in dataset.iterdir() if t.name in NETWORK_TASKS]
    for job, names in groups.items():
        if not names:
            continue
        argv = [*HARBOR, "run", "-p", str(dataset), "-a", "oracle", "-e", "docker", "-n", "4", "-q"]
        argv += ["--jobs-dir", str(jobs), "--job-name", job]
        for name in names:
            argv += ["-i", name]  # Harbor filters a local dataset by directory name
        started = time.perf_counter()
        done = subprocess.run(
            argv, capture_output=True, text=True, check=False, env={**os.environ, "DOCKER_HOST": host}
        )
        wall += time.perf_counter() - started
        if done.returncode != 0:
            lines = [line for line in done.stdout.splitlines() if "Error" in line]
            print(f"harbor job {job} failed: {' '.join(lines)[-600:]}", file=sys.stderr)
        rewards.update(_harbor_rewards(jobs / job))
    return rewards, wall


def _harbor_rewards(job_dir: Path) -> dict[str, float | None]:
    rewards: dict[str, float | None] = {}
    for result in job_dir.glob("*/result.json"):
        data = json.loads(result.read_text())
        if "task_name" not in data:
            continue  # the job's own result.json
        verifier = data.get("verifier_result") or {}
        rewards[data["task_name"]] = primary(verifier.get("rewards"))
        if data.get("exception_info"):
            info = data["exception_info"]
            what = info.get("exception_message", info) if isinstance(info, dict) else info
            print(f"harbor {data['task_name']}: {str(what)[:300]}", file=sys.stderr)
    return rewards


async def run_evsys(backend: str, dataset: Path, jobs: Path) -> tuple[dict[str, float | None], float]:
    """evsys's oracle on every task on `backend`; rewards by task name and wall seconds."""
    from evsys.engine import AgentSpec, Job, JobConfig

    config = JobConfig(
        datasets=[dataset],
        agents=[AgentSpec(name="oracle")],
        jobs_dir=jobs,
        job_name=f"evsys-{backend}",
        n_concurrent=4,
        sandbox=backend,
    )
    started = time.perf_counter()
    result = await Job(config).run()
    for trial in result.trials:
        if trial.failure is not None:
            print(f"evsys {backend} {trial.task_name}: {trial.failure.cause.value}", file=sys.stderr)
    return {t.task_name: t.reward for t in result.trials}, time.perf_counter() - started


def print_table(columns: dict[str, tuple[dict[str, float | None], float]]) -> bool:
    """The side-by-side table; True when some task's rewards differ between columns."""
    names = sorted({name for rewards, _ in columns.values() for name in rewards})
    print(f"{'task':28}" + "".join(f"{column:>16}" for column in columns))
    differ = False
    for name in names:
        row = [columns[column][0].get(name) for column in columns]
        differ |= len({repr(value) for value in row}) > 1
        print(f"{name:28}" + "".join(f"{'-' if v is None else f'{v:.3f}':>16}" for v in row))
    print(f"{'wall s (whole set)':28}" + "".join(f"{wall:>16.1f}" for _, wall in columns.values()))
    print("rewards differ" if differ else "rewards equal")
    return differ


async def compare(args: argparse.Namespace, host: str) -> bool:
    """Every column on one scratch copy of the set; True when a reward differs."""
    await load_bases(host)
    with tempfile.TemporaryDirectory(prefix="evsys-harbor-parity-", dir="/tmp") as scratch:
        root = Path(scratch)
        dataset = dataset_copy(root, [t for t in args.tasks.split(",") if t])
        columns: dict[str, tuple[dict[str, float | None], float]] = {}
        for backend in args.backends.split(","):
            columns[f"evsys {backend}"] = await run_evsys(backend, dataset, root / "jobs")
        if not args.no_harbor:
            columns["harbor docker"] = await asyncio.to_thread(run_harbor, dataset, root / "jobs", host)
        return print_table(columns)


def main() -> int:
    """Start the daemon, run every column, print the table; exit 1 when a reward differs."""
    from evsys.sandbox.docker import api
    from evsys.testing.dockerd import NETWORK, PrivateDockerd

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="local,docker", help="evsys backends, comma-separated")
    parser.add_argument("--no-harbor", action="store_true", help="evsys columns only")
    parser.add_argument("--tasks", default="", help="only these parity tasks, comma-separated")
    args = parser.parse_args()
    daemon = PrivateDockerd(nat=True)
    host = daemon.start()
    os.environ.update(EVSYS_DOCKER_HOST=host, EVSYS_DOCKER_NETWORK=NETWORK, EVSYS_DOCKER_BASE_IMAGE=BASES[0])
    api._client_for.cache_clear()
    try:
        differ = asyncio.run(compare(args, host))
    finally:
        daemon.stop()
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
