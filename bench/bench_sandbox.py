"""Local sandbox speed, each figure beside baselines measured in the same run on the same machine.

Baselines: (a) `asyncio.create_subprocess_exec("bash", "-c", ...)` per command, no isolation at all; (b) a
persistent bash fed commands over a pipe, reading output up to a sentinel (16 of them for 16 in flight).
Measured: median and p95 latency of `echo hi`, commands/s with 16 in flight, sandbox start+stop (median, 20),
and reset() of a running sandbox that just ran a command (median, 50): what a reused sandbox ("slot") pays
between two trials instead of a stop and a start. Then CONCURRENT_N sandboxes started at once and stopped at
once: starts per second, and this process's own CPU (user + system, from getrusage: the orchestrator's share,
without the spawner and the sandboxes) per start and per stop, with the load average when it began.
Run: `.venv/bin/python bench/bench_sandbox.py` (as root), or through bench/run_all.py;
`bench/bench_sandbox.py --starts` measures only the concurrent starts, `--reset` only the reset (to alternate
two trees quickly, PYTHONPATH=<tree>/src).
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

from evsys.records import SandboxSpec
from evsys.sandbox import LocalSandbox

LATENCY_N = 400
THROUGHPUT_N = 2000
IN_FLIGHT = 16
START_STOP_N = 20
RESET_N = 50
CONCURRENT_N = 256
COMMAND = "echo hi"
# A command that must start a program: no shell builtin, so no fork-free path (see docs/sandbox.md).
EXTERNAL = "/bin/true"


async def subprocess_exec(command: str) -> bytes:
    """Baseline (a): a fresh `bash -c` per command."""
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    return out


class PersistentBash:
    """Baseline (b): one long-lived bash; each command's output ends at a sentinel line."""

    SENTINEL = b"__bench_done__"

    def __init__(self) -> None:
        self.proc: asyncio.subprocess.Process | None = None
        self.lock = asyncio.Lock()

    async def start(self) -> None:
        """Launch the shell."""
        self.proc = await asyncio.create_subprocess_exec(
            "bash", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )

    async def run(self, command: str) -> bytes:
        """Send a command and read its output up to the sentinel."""
        assert self.proc is not None and self.proc.stdin and self.proc.stdout
        async with self.lock:
            self.proc.stdin.write(f"{command}; echo {self.SENTINEL.decode()} $?\n".encode())
            return await self.proc.stdout.readuntil(self.SENTINEL)

    async def close(self) -> None:
        """End the shell."""
        if self.proc is not None:
            self.proc.stdin.close()
            await self.proc.wait()


async def latency(run: Callable[[], Awaitable[object]], n: int = LATENCY_N) -> dict:
    """Median and p95 of sequential calls, in milliseconds (after a short warm-up)."""
    for _ in range(10):
        await run()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        await run()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return {"median_ms": statistics.median(samples), "p95_ms": samples[int(0.95 * len(samples)) - 1]}


async def throughput(runs: list[Callable[[], Awaitable[object]]], n: int = THROUGHPUT_N) -> float:
    """Commands per second with len(runs) workers each running commands back to back."""
    per_worker = n // len(runs)

    async def worker(run: Callable[[], Awaitable[object]]) -> None:
        for _ in range(per_worker):
            await run()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(r) for r in runs))
    return per_worker * len(runs) / (time.perf_counter() - t0)


async def start_stop(n: int = START_STOP_N) -> dict:
    """Median and p95 of start()+stop() of a default sandbox, in milliseconds."""
    async with LocalSandbox(SandboxSpec(name="bench-warm")):
        pass  # builds and caches the root layers once
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        sb = LocalSandbox(SandboxSpec(name=f"bench-start-{i}"))
        await sb.start()
        await sb.stop()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return {"median_ms": statistics.median(samples), "p95_ms": samples[int(0.95 * len(samples)) - 1]}


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def concurrent_starts(n: int = CONCURRENT_N) -> dict:
    """`n` default sandboxes started at once, then stopped at once: starts per second, and this process's
    CPU per start and per stop in milliseconds."""
    async with LocalSandbox(SandboxSpec(name="bench-warm")):
        pass  # builds and caches the root layers, starts the spawner
    boxes = [LocalSandbox(SandboxSpec(name=f"bench-many-{os.getpid()}-{i}")) for i in range(n)]
    load = os.getloadavg()[0]
    cpu0, t0 = _cpu_seconds(), time.perf_counter()
    try:
        await asyncio.gather(*(box.start() for box in boxes))
        cpu1, t1 = _cpu_seconds(), time.perf_counter()
    finally:
        await asyncio.gather(*(box.stop() for box in boxes), return_exceptions=True)
    cpu2, t2 = _cpu_seconds(), time.perf_counter()
    return {
        "sandboxes": n,
        "load_average": round(load, 2),
        "starts_per_sec": round(n / (t1 - t0), 1),
        "cpu_ms_per_start": round((cpu1 - cpu0) / n * 1000, 3),
        "stop_all_s": round(t2 - t1, 3),
        "cpu_ms_per_stop": round((cpu2 - cpu1) / n * 1000, 3),
    }


async def reset_cost(n: int = RESET_N) -> dict:
    """Median and p95 of reset() of a running sandbox after a command that wrote a file, in milliseconds."""
    samples = []
    async with LocalSandbox(SandboxSpec(name="bench-reset")) as sb:
        for _ in range(n):
            await sb.exec("echo x > /app/f")
            t0 = time.perf_counter()
            await sb.reset()
            samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return {"median_ms": statistics.median(samples), "p95_ms": samples[int(0.95 * len(samples)) - 1]}


async def measure() -> dict:
    """Every figure: evsys and both baselines."""
    results: dict = {}
    results["subprocess"] = await latency(lambda: subprocess_exec(COMMAND))
    results["subprocess"]["cmds_per_s"] = await throughput(
        [lambda: subprocess_exec(COMMAND)] * IN_FLIGHT, n=THROUGHPUT_N // 4
    )
    shells = [PersistentBash() for _ in range(IN_FLIGHT)]
    await asyncio.gather(*(s.start() for s in shells))
    try:
        results["persistent_bash"] = await latency(lambda: shells[0].run(COMMAND))
        results["persistent_bash"]["cmds_per_s"] = await throughput(
            [lambda s=s: s.run(COMMAND) for s in shells]
        )
    finally:
        await asyncio.gather(*(s.close() for s in shells))
    async with LocalSandbox(SandboxSpec(name="bench-exec")) as sb:
        results["evsys_local"] = await latency(lambda: sb.exec(COMMAND))
        results["evsys_local"]["cmds_per_s"] = await throughput([lambda: sb.exec(COMMAND)] * IN_FLIGHT)
        external = await latency(lambda: sb.exec(EXTERNAL), n=LATENCY_N // 2)
        results["evsys_local"]["external_median_ms"] = external["median_ms"]
        results["evsys_local"]["external_cmds_per_s"] = await throughput(
            [lambda: sb.exec(EXTERNAL)] * IN_FLIGHT, n=THROUGHPUT_N // 4
        )
    external = await latency(lambda: subprocess_exec(EXTERNAL), n=LATENCY_N // 2)
    results["subprocess"]["external_median_ms"] = external["median_ms"]
    results["subprocess"]["external_cmds_per_s"] = await throughput(
        [lambda: subprocess_exec(EXTERNAL)] * IN_FLIGHT, n=THROUGHPUT_N // 4
    )
    results["evsys_local"]["start_stop"] = await start_stop()
    results["evsys_local"]["reset"] = await reset_cost()
    results["evsys_local"]["concurrent"] = await concurrent_starts()
    return results


def print_table(results: dict) -> None:
    """A plain table with ratios against both baselines."""
    ev, sp, pb = results["evsys_local"], results["subprocess"], results["persistent_bash"]
    print(f"{'measure':34} {'evsys local':>12} {'subprocess':>12} {'persist bash':>12} {'vs subproc':>10}")
    rows = [
        ("echo hi latency, median (ms)", "median_ms", False),
        ("echo hi latency, p95 (ms)", "p95_ms", False),
        (f"commands/s, {IN_FLIGHT} in flight", "cmds_per_s", True),
    ]
    for label, key, higher_is_better in rows:
        ratio = ev[key] / sp[key] if higher_is_better else sp[key] / ev[key]
        print(f"{label:34} {ev[key]:12.3f} {sp[key]:12.3f} {pb[key]:12.3f} {ratio:9.1f}x")
    for label, key, higher_is_better in (
        (f"{EXTERNAL} latency, median (ms)", "external_median_ms", False),
        (f"{EXTERNAL} commands/s, {IN_FLIGHT} in fl.", "external_cmds_per_s", True),
    ):
        ratio = ev[key] / sp[key] if higher_is_better else sp[key] / ev[key]
        print(f"{label:34} {ev[key]:12.3f} {sp[key]:12.3f} {'':>12} {ratio:9.1f}x")
    ss = ev["start_stop"]
    print(f"{'sandbox start+stop, median (ms)':34} {ss['median_ms']:12.1f}")
    print(f"{'sandbox start+stop, p95 (ms)':34} {ss['p95_ms']:12.1f}")
    rs = ev["reset"]
    ratio = ss["median_ms"] / rs["median_ms"]
    print(f"{'sandbox reset, median (ms)':34} {rs['median_ms']:12.1f}  ({ratio:.1f}x faster than start+stop)")
    print(f"{'sandbox reset, p95 (ms)':34} {rs['p95_ms']:12.1f}")
    print_concurrent(ev["concurrent"])
    print("(vs subproc: how many times better evsys is than a fresh unisolated `bash -c`)")


def print_concurrent(figures: dict) -> None:
    """The concurrent-start figures, one line each."""
    n = figures["sandboxes"]
    print(f"{f'{n} started at once: starts/s':34} {figures['starts_per_sec']:12.1f}")
    print(f"{'  orchestrator CPU per start (ms)':34} {figures['cpu_ms_per_start']:12.3f}")
    print(f"{f'  stop of all {n} (s)':34} {figures['stop_all_s']:12.3f}")
    print(f"{'  orchestrator CPU per stop (ms)':34} {figures['cpu_ms_per_stop']:12.3f}")
    print(f"{'  load average at the start':34} {figures['load_average']:12.2f}")


async def main() -> dict:
    """Run the benchmark, print the table, return the figures."""
    results = await measure()
    print_table(results)
    return results


if __name__ == "__main__":
    if sys.argv[1:] == ["--starts"]:
        print_concurrent(asyncio.run(concurrent_starts()))
    elif sys.argv[1:] == ["--reset"]:
        figures = asyncio.run(reset_cost())
        print(f"{'sandbox reset, median (ms)':34} {figures['median_ms']:12.2f}")
        print(f"{'sandbox reset, p95 (ms)':34} {figures['p95_ms']:12.2f}")
    else:
        asyncio.run(main())
