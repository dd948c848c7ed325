"""Harbor's own `harbor run` on 100 trivial oracle tasks at -n 8: with evsys's environment
(`-e evsys.integrations.harbor:EvsysEnvironment`, local sandboxes) beside Harbor's Docker environment on a
private dockerd, whole command, same run. Target: evsys >= 5x faster.

The tasks: 100 directories, each `environment/Dockerfile` = `FROM python:3.11-slim-bookworm` + `WORKDIR
/app`, solve.sh `echo ok > /app/out.txt`, test.sh reward 1 when the file holds `ok`; Harbor's default
(public) network on both. evsys's column runs Harbor from .venv-harbor (scripts/bootstrap.sh); the Docker
column runs the same Harbor version from bench/harbor_rootfs.sh (an Ubuntu 24.04 root filesystem with the
docker CLI and compose v2, which Debian 12 lacks), against a private dockerd (evsys.testing.dockerd, with NAT)
into which the base image is loaded as evsys has it (synthesised: no registry is reachable here). Both
read LiteLLM's price list from its package (LITELLM_LOCAL_MODEL_COST_MAP), else each would spend ~10 s
retrying a download. Prints wall seconds of the whole command, Harbor's own job time (its result.json) and
the ratio; skips the Docker column when dockerd cannot start or the root filesystem cannot be made.

Usage: `python bench/run_all.py harbor_env` (as root), or `python bench/bench_harbor_env.py`.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from datetime import datetime
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
N_TASKS = 100
N_CONCURRENT = 8
TARGET_RATIO = 5.0
ENVIRONMENT = "evsys.integrations.harbor:EvsysEnvironment"
BASE = "python:3.11-slim-bookworm"
TOML = '[task]\nname = "bench/{name}"\n[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 120\n'
SOLVE = "#!/bin/bash\necho ok > /app/out.txt\n"
TEST = (
    "#!/bin/bash\n"
    'if [ "$(cat /app/out.txt)" = ok ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
)


def write_tasks(root: Path) -> Path:
    """N_TASKS trivial task directories under `root`."""
    for i in range(N_TASKS):
        task = root / f"trivial-{i:03d}"
        for sub in ("environment", "solution", "tests"):
            (task / sub).mkdir(parents=True)
        (task / "task.toml").write_text(TOML.format(name=task.name))
        (task / "instruction.md").write_text("Write ok to /app/out.txt.\n")
        (task / "environment" / "Dockerfile").write_text(f"FROM {BASE}\nWORKDIR /app\n")
        (task / "solution" / "solve.sh").write_text(SOLVE)
        (task / "tests" / "test.sh").write_text(TEST)
    return root


def harbor_venv() -> Path | None:
    """The virtualenv with Harbor (EVSYS_HARBOR_VENV, else .venv-harbor), if there is one."""
    venv = Path(os.environ.get("EVSYS_HARBOR_VENV", REPO / ".venv-harbor"))
    return venv if (venv / "bin" / "harbor").is_file() else None


def harbor_version(venv: Path) -> str:
    """The Harbor version installed in `venv`."""
    code = "import importlib.metadata as m; print(m.version('harbor'))"
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True
    ).stdout.strip()


def run(
    harbor: list[str], flags: list[str], dataset: Path, jobs: Path, job: str, env: dict[str, str]
) -> dict:
    """One whole `harbor run FLAGS` command: wall seconds, Harbor's own job seconds, rewards and errors."""
    argv = [*harbor, "run", *flags, "-p", str(dataset), "-a", "oracle", "-n", str(N_CONCURRENT), "-q", "-y"]
    argv += ["--jobs-dir", str(jobs), "--job-name", job]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=3600)
    wall = time.perf_counter() - started
    result = jobs / job / "result.json"
    if not result.is_file():
        return {"wall_sec": round(wall, 2), "error": (done.stdout + done.stderr)[-800:]}
    data = json.loads(result.read_text())
    finished, started_at = (datetime.fromisoformat(data[key]) for key in ("finished_at", "started_at"))
    job_sec = (finished - started_at).total_seconds()
    rewards, errors = [], []
    for trial in (jobs / job).glob("*/result.json"):
        record = json.loads(trial.read_text())
        rewards.append(((record.get("verifier_result") or {}).get("rewards") or {}).get("reward"))
        if record.get("exception_info"):
            errors.append(record["exception_info"].get("exception_type"))
    return {
        "wall_sec": round(wall, 2),
        "harbor_job_sec": round(job_sec, 2),
        "reward_1": sum(1 for r in rewards if r == 1.0),
        "trials": len(rewards),
        "errors": sorted(set(errors)),
    }


def base_env() -> dict[str, str]:
    """The environment of both Harbor processes: this checkout's evsys, LiteLLM's packaged price list."""
    return {**os.environ, "PYTHONPATH": str(REPO / "src"), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


async def load_base(host: str) -> None:
    """The tasks' base image, as evsys has it (pulled or synthesised), loaded into the daemon at `host`."""
    from evsys.images import ImageService
    from evsys.sandbox.docker import api

    service = ImageService()
    stored, _ = await service.ensure_ref(BASE)
    spec = await service.storage.spec(stored)
    os.environ["EVSYS_DOCKER_HOST"] = host
    api._client_for.cache_clear()
    await asyncio.to_thread(api.load_image, spec.source, BASE)


def docker_column(dataset: Path, warm: Path, jobs: Path, version: str) -> dict:
    """Harbor's Docker environment on a private dockerd, same tasks, same Harbor version (after a warm-up
    job on `warm`)."""
    from evsys.testing.dockerd import DockerdUnavailable, PrivateDockerd

    rootfs = ["bash", str(BENCH_DIR / "harbor_rootfs.sh")]
    env = {**base_env(), "HARBOR_VERSION": version}
    prepared = subprocess.run([*rootfs, "harbor", "--version"], capture_output=True, text=True, env=env)
    if prepared.returncode != 0:
        return {"skipped": f"harbor_rootfs.sh failed: {prepared.stderr[-400:]}"}
    daemon = PrivateDockerd(nat=True)
    try:
        host = daemon.start()
    except DockerdUnavailable as exc:
        return {"skipped": str(exc)[:400]}
    try:
        asyncio.run(load_base(host))
        env["DOCKER_HOST"] = host
        flags = ["-e", "docker"]
        run([*rootfs, "harbor"], flags, warm, jobs, "warm-docker", env)
        return run([*rootfs, "harbor"], flags, dataset, jobs, "harbor-docker", env)
    finally:
        daemon.stop()


def measure(root: Path) -> dict:
    """Both columns on one scratch dataset."""
    venv = harbor_venv()
    if venv is None:
        return {"skipped": "no .venv-harbor (scripts/bootstrap.sh makes it when a Python >= 3.12 is found)"}
    version = harbor_version(venv)
    dataset = write_tasks(root / "tasks")
    jobs = root / "jobs"
    harbor, flags = [str(venv / "bin" / "harbor")], ["-e", ENVIRONMENT]
    # a job of two tasks before each measured one, outside the measurement (caches, first imports)
    warm = write_tasks(root / "warm")
    for extra in sorted(warm.iterdir())[2:]:
        shutil.rmtree(extra)
    run(harbor, flags, warm, jobs, "warm-evsys", base_env())
    evsys = run(harbor, flags, dataset, jobs, "harbor-evsys", base_env())
    return {"harbor_version": version, "evsys": evsys, "docker": docker_column(dataset, warm, jobs, version)}


def report(figures: dict) -> None:
    """Print the side-by-side table."""
    if "skipped" in figures:
        print(f"skipped: {figures['skipped']}")
        return
    print(f"harbor {figures['harbor_version']}, {N_TASKS} trivial oracle tasks at -n {N_CONCURRENT}")
    print(f"{'environment':>12} {'wall s':>8} {'job s':>8} {'reward 1':>9}  errors")
    for name in ("evsys", "docker"):
        column = figures[name]
        if "skipped" in column or "error" in column:
            print(f"{name:>12}  {column.get('skipped') or column.get('error')}")
            continue
        print(
            f"{name:>12} {column['wall_sec']:>8.1f} {column['harbor_job_sec']:>8.1f} "
            f"{column['reward_1']:>5}/{column['trials']:<3}  {', '.join(column['errors']) or '-'}"
        )
    docker, evsys = figures["docker"], figures["evsys"]
    if "wall_sec" in docker and "harbor_job_sec" in docker and "harbor_job_sec" in evsys:
        figures["ratio_wall"] = round(docker["wall_sec"] / evsys["wall_sec"], 1)
        figures["ratio_job"] = round(docker["harbor_job_sec"] / evsys["harbor_job_sec"], 1)
        met = "met" if figures["ratio_wall"] >= TARGET_RATIO else "missed"
        print(
            f"evsys is {figures['ratio_wall']}x faster, whole command ({figures['ratio_job']}x Harbor's job "
            f"time); target >= {TARGET_RATIO:g}x: {met}"
        )


def measure_in_scratch() -> dict:
    """`measure` in a scratch directory under EVSYS_BENCH_DIR or the project's jobs/, removed afterwards."""
    parent = Path(os.environ.get("EVSYS_BENCH_DIR") or REPO / "jobs")
    parent.mkdir(parents=True, exist_ok=True)
    root = parent / f".bench-harbor-env-{os.getpid()}"
    try:
        return measure(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def main() -> dict:
    """Run the benchmark and return its figures."""
    figures = await asyncio.to_thread(measure_in_scratch)
    report(figures)
    return figures


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main()), indent=2))
