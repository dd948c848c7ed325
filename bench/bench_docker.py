"""The docker backend beside the local one, in the same run: exec latency and 100 oracle trials.

Daemon: `$EVSYS_DOCKER_HOST` when set (with `$EVSYS_DOCKER_BASE_IMAGE` present in it), else a private
`dockerd` started here the way the tests start it (evsys.testing.dockerd: own socket and data root, no
docker0, the mmdebstrap Debian base cached under evsys's cache dir) and stopped at the end. When no daemon can
start, the benchmark says why and returns the reason (a skip, not a failure).

Figures:
- `echo hi` through `Sandbox.exec`, median and p95 (sequential) and commands/s with 16 in flight, for
  `DockerSandbox` and `LocalSandbox`; beside them the whole `docker exec` CLI command (a new process per call,
  what a shell script driving Docker pays).
- 100 trivial oracle trials at -n 8 (bench_engine's task) on each backend: in-process (`Job.run()`, the
  interpreter already warm) and whole-command (`python -m evsys.cli.main run ...`, start-up and CLI included).

Usage: `python bench/bench_docker.py` or `python bench/run_all.py docker`.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import bench_engine  # noqa: E402  (the trivial task and its in-process runner)
from bench_sandbox import latency, throughput  # noqa: E402

COMMAND = "echo hi"
LATENCY_N = 100
THROUGHPUT_N = 320
IN_FLIGHT = 16
N_TRIALS = 100
N_CONCURRENT = 8


class Daemon:
    """The daemon the benchmark runs against: the user's (`$EVSYS_DOCKER_HOST`), or a private one."""

    def __init__(self) -> None:
        self.private = None
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> str:
        from evsys.sandbox.docker import api
        from evsys.testing.dockerd import BASE_REF, NETWORK, PrivateDockerd

        if not os.environ.get("EVSYS_DOCKER_HOST"):
            self.private = PrivateDockerd()
            host = self.private.start()  # DockerdUnavailable says why it cannot
            base = self.private.import_base()
            for name, value in (
                ("EVSYS_DOCKER_HOST", host),
                ("EVSYS_DOCKER_BASE_IMAGE", base or BASE_REF),
                ("EVSYS_DOCKER_NETWORK", NETWORK),
            ):
                self.saved[name] = os.environ.get(name)
                os.environ[name] = value
        api._client_for.cache_clear()
        return os.environ["EVSYS_DOCKER_HOST"]

    def __exit__(self, *exc: object) -> None:
        from evsys.sandbox.docker import api

        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        api._client_for.cache_clear()
        if self.private is not None:
            self.private.stop()


async def exec_figures(sandbox_cls) -> dict:
    """`echo hi` latency and throughput through one started sandbox of `sandbox_cls`."""
    from evsys.records import SandboxSpec

    async with sandbox_cls(SandboxSpec(name=f"bench-{sandbox_cls.__name__.lower()}")) as sb:
        figures = await latency(lambda: sb.exec(COMMAND), n=LATENCY_N)
        figures["cmds_per_s"] = await throughput([lambda: sb.exec(COMMAND)] * IN_FLIGHT, n=THROUGHPUT_N)
    return figures


async def docker_cli_figures(host: str) -> dict:
    """The whole `docker exec` CLI command per call, against a container started for it."""
    image = os.environ.get("EVSYS_DOCKER_BASE_IMAGE", "debian:bookworm-slim")
    run = ["docker", "-H", host, "run", "-d", "--rm", "--network", "none", image, "sleep", "infinity"]
    started = await asyncio.to_thread(subprocess.run, run, check=True, capture_output=True, text=True)
    container = started.stdout.strip()

    async def one() -> None:
        argv = ["docker", "-H", host, "exec", container, "bash", "-c", COMMAND]
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
        await proc.communicate()

    try:
        figures = await latency(one, n=LATENCY_N // 2)
        figures["cmds_per_s"] = await throughput([one] * IN_FLIGHT, n=THROUGHPUT_N // 2)
    finally:
        await asyncio.to_thread(
            subprocess.run, ["docker", "-H", host, "rm", "-f", container], capture_output=True
        )
    return figures


def whole_command(dataset: Path, jobs: Path, backend: str, name: str) -> tuple[float, str]:
    """Seconds for `evsys run` of the 100 trials as a fresh process; and its last output line."""
    argv = [sys.executable, "-m", "evsys.cli.main", "run", str(dataset), "-a", "oracle"]
    argv += ["-k", str(N_TRIALS), "-n", str(N_CONCURRENT), "--sandbox", backend]
    argv += ["--jobs-dir", str(jobs), "--job-name", name]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
    return elapsed, "ok" if done.returncode == 0 else f"exit {done.returncode}"


async def trial_figures(root: Path) -> dict:
    """100 oracle trials per backend, in-process and whole-command."""
    from evsys.engine import AgentSpec, Job, JobConfig

    dataset = bench_engine._write_task(root).parent
    figures: dict = {}
    for backend in ("local", "docker"):
        config = JobConfig(
            datasets=[dataset],
            agents=[AgentSpec(name="oracle")],
            n_attempts=N_TRIALS,
            n_concurrent=N_CONCURRENT,
            jobs_dir=root / "jobs",
            job_name=f"in-process-{backend}",
            sandbox=backend,
        )
        started = time.perf_counter()
        result = await Job(config).run()
        elapsed = time.perf_counter() - started
        rewards = [t.reward for t in result.trials]
        in_process = {"seconds": elapsed, "mean_reward": sum(r or 0 for r in rewards) / len(rewards)}
        seconds, status = await asyncio.to_thread(
            whole_command, dataset, root / "jobs", backend, f"whole-{backend}"
        )
        figures[backend] = {"in_process": in_process, "whole_command": {"seconds": seconds, "status": status}}
    return figures


def print_table(results: dict) -> None:
    """Both backends side by side."""
    ex = results["exec"]
    print(f"{'echo hi through exec':34} {'local':>10} {'docker':>10} {'docker CLI':>11}")
    rows = (("median (ms)", "median_ms"), ("p95 (ms)", "p95_ms"), ("commands/s, 16", "cmds_per_s"))
    for label, key in rows:
        row = (ex["local"][key], ex["docker"][key], ex["docker_cli"][key])
        print(f"  {label:32} " + " ".join(f"{v:10.2f}" for v in row[:2]) + f" {row[2]:11.2f}")
    tr = results["trials"]
    print(f"{N_TRIALS} oracle trials at -n {N_CONCURRENT} (s)   {'local':>10} {'docker':>10}")
    kinds = (("in-process Job.run()", "in_process"), ("whole command (evsys run)", "whole_command"))
    for label, key in kinds:
        row = [tr[b][key]["seconds"] for b in ("local", "docker")]
        print(f"  {label:32} " + " ".join(f"{v:10.2f}" for v in row))
    print(
        f"  mean reward (in-process)         {tr['local']['in_process']['mean_reward']:10.3f} "
        f"{tr['docker']['in_process']['mean_reward']:10.3f}"
    )


async def main() -> dict:
    """Run the benchmark, print the table, return the figures (or the reason it could not run)."""
    from evsys.sandbox import LocalSandbox
    from evsys.sandbox.docker import DockerSandbox
    from evsys.testing.dockerd import DockerdUnavailable

    try:
        daemon = Daemon()
        host = daemon.__enter__()
    except DockerdUnavailable as exc:
        print(f"skipped: {exc}")
        return {"skipped": str(exc)}
    try:
        results: dict = {"exec": {}}
        results["exec"]["local"] = await exec_figures(LocalSandbox)
        results["exec"]["docker"] = await exec_figures(DockerSandbox)
        results["exec"]["docker_cli"] = await docker_cli_figures(host)
        with tempfile.TemporaryDirectory(prefix="evsys-bench-docker-") as scratch:
            results["trials"] = await trial_figures(Path(scratch))
    finally:
        daemon.__exit__(None, None, None)
    print_table(results)
    return results


if __name__ == "__main__":
    asyncio.run(main())
