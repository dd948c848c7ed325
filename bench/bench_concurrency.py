"""LLM-bound trials at RL concurrency: `evsys run -a loop -n C` against a scripted model, beside the ideal.

The model is bench/scripted_model_server.py (its own process, 127.0.0.1, answering each call after LATENCY_S
seconds; first call a `bash` tool call, second a final answer), given as `-m vllm:scripted --base-url ...`.
N = C trivial tasks (each its own task directory; the command writes a file, test.sh checks it), loop agent,
the whole command as a user runs it (`evsys run`, output to a file), for C in CONCURRENCY. Each run is
printed beside its ideal: waves x calls x latency (ceil(N / C) x 2 x LATENCY_S).

Orchestrator CPU is the user+sys CPU of the `evsys run` process and of its trial worker processes (the
`processes` executor's; psutil, sampled until each exits; the model server's, the sandbox spawner's and the
sandboxes' processes are not in it; its user part printed beside), per trial: in total (startup included) and
marginal ((CPU at N - CPU of one trial) / (N - 1), the startup and imports taken out). Beside them, the CPU of
the process and its reaped children (workers, sandbox launchers) from wait4.

Each level runs once per executor in EXECUTORS (default `local processes`: the in-process executor, then the
trials spread over worker processes, `--executor processes`, one after the other at each level so both see
the same machine), with the load average at the start of each run.

Also: local sandbox starts per second (START_N started at once, the sandbox API directly) and memory per
idle sandbox (their memory cgroups' usage, and the unique memory of their processes), beside the issue's
figures measured quietly (~224 starts/s, 0.4-1.2 MB each).

And a trainer's steps (bench/trainer_steps.py, in its own process): at each level the same N = C trials
run STEPS times as jobs one after another over one sandbox pool the process owns (`Job(..., sandboxes=pool)`),
the first step starting its sandboxes, the next ones on those the last step released, reset; each step's
wall beside the same ideal, and the process's CPU per trial (startup not included: it runs once per training
run). Then the same steps on the same tasks with Harbor's default network (no `network_mode`: public,
slirp4netns), once reusing the sandboxes and once with a pool that keeps none (every step starts its own, as
before public sandboxes could be reset). EVSYS_BENCH_STEPS=0 leaves them out.

EVSYS_BENCH_CONCURRENCY="64 256" picks the levels; EVSYS_BENCH_EXECUTORS="local processes:1" the executors
(`processes:K`: K worker processes);
EVSYS_BENCH_SRC=/other/tree/src runs another tree's evsys (a before/after comparison in the same minutes).
Usage: `python bench/bench_concurrency.py` or `python bench/run_all.py concurrency`.
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from sandbox_capacity import PARALLEL, raw_rates, sandbox_starts

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
CONCURRENCY = [int(c) for c in os.environ.get("EVSYS_BENCH_CONCURRENCY", "64 256 1024").split()]
LATENCY_S = 0.5
CALLS_PER_TRIAL = 2
START_N = int(os.environ.get("EVSYS_BENCH_START_N", "256"))
# acceptance on a quiet machine (wall / ideal at C, CPU ms per trial)
TARGET_RATIO = {256: 1.5, 1024: 3.0}
TARGET_CPU_MS = 8.0
EXECUTORS = os.environ.get("EVSYS_BENCH_EXECUTORS", "local processes").split()
WORKER_MARK = "evsys.engine.executors.process_worker"  # in a trial worker process's command line
ISSUE_START_PER_S = 224.0
STEPS = int(os.environ.get("EVSYS_BENCH_STEPS", "3"))

TEST = (
    "#!/bin/bash\n"
    'if [ "$(cat /app/out.txt)" = ok ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
)
TOML = '[task]\nname = "{name}"\n[agent]\ntimeout_sec = 600\n[verifier]\ntimeout_sec = 60\n[environment]\n'
NO_NETWORK = 'network_mode = "no-network"\n'
INSTRUCTION = "Write ok to /app/out.txt.\nRun: echo ok > /app/out.txt\n"


def write_dataset(root: Path, n: int, *, network: bool = False) -> Path:
    """`n` trivial task directories under `root`, without network (`network`: Harbor's default, public)."""
    for i in range(n):
        task = root / f"t{i:05d}"
        (task / "tests").mkdir(parents=True)
        (task / "task.toml").write_text(TOML.format(name=f"t{i:05d}") + ("" if network else NO_NETWORK))
        (task / "instruction.md").write_text(INSTRUCTION)
        (task / "tests" / "test.sh").write_text(TEST)
    return root


class ModelServer:
    """The scripted model server in its own process."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    def start(self) -> str:
        """Start it; its base URL."""
        self.proc = subprocess.Popen(
            [sys.executable, str(BENCH_DIR / "scripted_model_server.py"), "--latency", str(LATENCY_S)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("port "):
            raise RuntimeError(f"the scripted model server did not start: {line!r}")
        self.port = int(line.split()[1])
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        """Stop it."""
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()


def _cpu_sampler(pid: int, last: dict[str, float], done: threading.Event) -> None:
    """Keep `last["cpu"]`/`last["user"]`: user+sys (and user) seconds of the process and of its trial worker
    processes (each as last seen), until it exits."""
    try:
        proc = psutil.Process(pid)
    except psutil.Error:
        return
    seen: dict[int, tuple[float, float]] = {}
    workers: dict[int, psutil.Process] = {}
    while not done.is_set():
        try:
            times = proc.cpu_times()
            seen[pid] = (times.user + times.system, times.user)
            for child in proc.children():
                if child.pid not in workers and WORKER_MARK in " ".join(child.cmdline()):
                    workers[child.pid] = child
        except psutil.Error:
            break
        for worker in list(workers.values()):
            try:
                times = worker.cpu_times()
            except psutil.Error:
                del workers[worker.pid]
                continue
            seen[worker.pid] = (times.user + times.system, times.user)
        last["cpu"] = sum(cpu for cpu, _ in seen.values())
        last["user"] = sum(user for _, user in seen.values())
        last["workers"] = len(seen) - 1
        time.sleep(0.02)


def run_command(argv: list[str], log: Path) -> dict[str, float]:
    """Run `argv` to its end: wall seconds, its own CPU (psutil) and with reaped children (wait4)."""
    env = {**os.environ, "PYTHONPATH": os.environ.get("EVSYS_BENCH_SRC") or str(ROOT / "src")}
    started = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    last: dict[str, float] = {"cpu": 0.0, "user": 0.0, "workers": 0}
    done = threading.Event()
    sampler = threading.Thread(target=_cpu_sampler, args=(proc.pid, last, done), daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} ... exited {proc.returncode}; see {log}")
    tree = usage.ru_utime + usage.ru_stime
    return {
        "wall": wall,
        "own_cpu": last["cpu"],
        "own_user": last["user"],
        "workers": last["workers"],
        "tree_cpu": tree,
    }


def evsys_run(
    dataset: Path, jobs: Path, name: str, base_url: str, concurrency: int, executor: str = "local"
) -> dict:
    """One `evsys run` of the loop agent over `dataset` against the scripted model on `executor`; figures and
    job result."""
    import json

    argv = [
        str(Path(sys.executable).parent / "evsys"),
        "run",
        str(dataset),
        "-a",
        "loop",
        "-m",
        "vllm:scripted",
        "--base-url",
        base_url,
        "-n",
        str(concurrency),
        "--jobs-dir",
        str(jobs),
        "--job-name",
        name,
    ]
    name_part, _, workers = executor.partition(":")  # `processes:1`: one worker process
    argv += ["--executor", name_part, *(["--workers", workers] if workers else [])]
    load = os.getloadavg()[0]
    figures = run_command(argv, jobs / f"{name}.log")
    result = json.loads((jobs / name / "result.json").read_text())
    figures["mean_reward"] = result.get("mean_reward")
    figures["n_errors"] = result.get("n_errors")
    figures["load"] = load
    return figures


def _report(c: int, executor: str, run: dict, one: dict) -> dict:
    ideal = math.ceil(c / c) * CALLS_PER_TRIAL * LATENCY_S
    marginal = (run["own_cpu"] - one["own_cpu"]) / max(c - 1, 1) * 1000
    figures = {
        "trials": c,
        "concurrency": c,
        "wall_sec": round(run["wall"], 2),
        "ideal_sec": ideal,
        "ratio": round(run["wall"] / ideal, 2),
        "target_ratio": TARGET_RATIO.get(c),
        "cpu_ms_per_trial": round(run["own_cpu"] / c * 1000, 2),
        "user_cpu_ms_per_trial": round(run["own_user"] / c * 1000, 2),
        "marginal_cpu_ms_per_trial": round(marginal, 2),
        "tree_cpu_ms_per_trial": round(run["tree_cpu"] / c * 1000, 2),
        "target_cpu_ms": TARGET_CPU_MS,
        "mean_reward": run["mean_reward"],
        "errors": run["n_errors"],
        "worker_processes": run["workers"],
        "load_avg_1m": round(run["load"], 2),
    }
    target = f" (target <= {TARGET_RATIO[c]}x)" if c in TARGET_RATIO else ""
    print(
        f"{executor:>9} -n {c:>4}, {c:>4} trials (load {run['load']:.1f}): {run['wall']:6.2f} s wall, "
        f"ideal {ideal:.1f} s: "
        f"{figures['ratio']}x{target}; orchestrator CPU {figures['cpu_ms_per_trial']} ms/trial in total "
        f"({figures['user_cpu_ms_per_trial']} ms user), "
        f"{figures['marginal_cpu_ms_per_trial']} ms marginal (target <= {TARGET_CPU_MS}), "
        f"{figures['tree_cpu_ms_per_trial']} ms with reaped children; {run['workers']} worker processes; "
        f"reward {run['mean_reward']}, {run['n_errors']} errors",
        flush=True,
    )
    return figures


def trainer_steps(dataset: Path, jobs: Path, base_url: str, c: int, *, keep: bool = True) -> list[dict]:
    """bench/trainer_steps.py over `dataset` at -n `c`, STEPS steps (`keep=False`: a pool keeping no
    sandbox); one dict per step."""
    import json

    env = {**os.environ, "PYTHONPATH": os.environ.get("EVSYS_BENCH_SRC") or str(ROOT / "src")}
    argv = [sys.executable, str(BENCH_DIR / "trainer_steps.py"), str(dataset), str(jobs), base_url, str(c)]
    done = subprocess.run(
        [*argv, str(STEPS), str(c if keep else 0)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"trainer_steps.py exited {done.returncode}: {done.stderr[-2000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _report_steps(c: int, steps: list[dict], label: str = "") -> dict:
    ideal = CALLS_PER_TRIAL * LATENCY_S
    later = sorted(steps[1:], key=lambda step: step["wall"])
    middle = later[len(later) // 2] if later else steps[0]
    figures = {
        "steps": len(steps),
        "first_step_wall_sec": round(steps[0]["wall"], 2),
        "first_step_ratio": round(steps[0]["wall"] / ideal, 2),
        "first_step_cpu_ms_per_trial": round(steps[0]["cpu"] / c * 1000, 2),
        "next_steps_wall_sec": [round(step["wall"], 2) for step in steps[1:]],
        "next_step_ratio": round(middle["wall"] / ideal, 2),
        "next_step_cpu_ms_per_trial": round(middle["cpu"] / c * 1000, 2),
        "reused_per_next_step": [step["reused"] for step in steps[1:]],
        "errors": sum(step["errors"] for step in steps),
    }
    target = f" (target <= {TARGET_RATIO[c]}x)" if c in TARGET_RATIO else ""
    print(
        f"  trainer steps{label} -n {c:>4}: first {figures['first_step_wall_sec']} s "
        f"({figures['first_step_ratio']}x, {figures['first_step_cpu_ms_per_trial']} ms CPU/trial); next "
        f"{figures['next_steps_wall_sec']} s, median {figures['next_step_ratio']}x{target}, "
        f"{figures['next_step_cpu_ms_per_trial']} ms CPU/trial, reused {figures['reused_per_next_step']}, "
        f"{figures['errors']} errors",
        flush=True,
    )
    return figures


async def _public_steps(root: Path, jobs: Path, base_url: str, c: int) -> dict:
    """The trainer's steps on default-network (public) tasks: reusing the sandboxes, and not."""
    dataset = write_dataset(root / f"p{c}", c, network=True)
    figures = {}
    for keep, label in ((True, "reused"), (False, "not_reused")):
        steps = await asyncio.to_thread(trainer_steps, dataset, jobs, base_url, c, keep=keep)
        figures[label] = _report_steps(c, steps, f" (public network, {label.replace('_', ' ')})")
    return figures


def _bench_root() -> Path:
    parent = Path(os.environ.get("EVSYS_BENCH_DIR") or ROOT / "jobs")
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=".bench-concurrency-", dir=parent))


async def main() -> dict:
    """Run the benchmark and return its figures."""
    root = _bench_root()
    server = ModelServer()
    results: dict = {"latency_s": LATENCY_S, "calls_per_trial": CALLS_PER_TRIAL, "runs": {}}
    try:
        base_url = server.start()
        jobs = root / "jobs"
        jobs.mkdir()
        one_set = write_dataset(root / "d1", 1)
        ones = {}
        for executor in EXECUTORS:
            one = await asyncio.to_thread(
                evsys_run, one_set, jobs, f"one-{executor.replace(':', '-')}", base_url, 1, executor
            )
            print(
                f"{executor:>9}: one trial at -n 1 (startup included): {one['wall']:.2f} s wall, "
                f"{one['own_cpu'] * 1000:.0f} ms orchestrator CPU",
                flush=True,
            )
            ones[executor] = one
        results["one_trial"] = {
            e: {"wall_sec": round(one["wall"], 2), "cpu_ms": round(one["own_cpu"] * 1000)}
            for e, one in ones.items()
        }
        for c in CONCURRENCY:
            dataset = write_dataset(root / f"d{c}", c)
            for executor in EXECUTORS:
                run = await asyncio.to_thread(
                    evsys_run, dataset, jobs, f"c{c}-{executor.replace(':', '-')}", base_url, c, executor
                )
                results["runs"].setdefault(executor, {})[str(c)] = _report(c, executor, run, ones[executor])
            if STEPS > 0:
                steps = await asyncio.to_thread(trainer_steps, dataset, jobs, base_url, c)
                results.setdefault("trainer_steps", {})[str(c)] = _report_steps(c, steps)
                results.setdefault("trainer_steps_default_network", {})[str(c)] = await _public_steps(
                    root, jobs, base_url, c
                )
        if START_N <= 0:  # EVSYS_BENCH_START_N=0: the command runs only
            return results
        starts = await sandbox_starts(START_N)
        floor = await asyncio.to_thread(raw_rates)
        results["machine_without_evsys"] = floor
        results["sandbox_starts"] = starts
        print(
            f"{START_N} local sandboxes started at once: {starts['starts_per_sec']} starts/s "
            f"(issue, quiet: ~{ISSUE_START_PER_S:.0f}/s); idle: {starts['cgroup_mb_per_idle_sandbox']} MB "
            f"each by its memory cgroup, {starts['unique_mb_per_idle_sandbox']} MB unique to its "
            "processes (issue, quiet: 0.4-1.2 MB)",
            flush=True,
        )
        print(f"this machine without evsys ({PARALLEL} at a time, per second): {floor}", flush=True)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    return results


if __name__ == "__main__":
    asyncio.run(main())
