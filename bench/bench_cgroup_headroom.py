"""The cost of the machinery's headroom (issue 38): a sandbox's memory and pids cgroups with machinery /
agent / verifier children (sandbox/local/cgsetup.py) against one flat cgroup per controller, as before,
measured in the same run, rounds alternating.

Measured per layout (memory_mb=256, the median of every round's samples): start+stop of a sandbox; the first
command of a fresh sandbox that starts a program (forked by the daemon, so it joins the agent's cgroups: one
cgroup migration per hierarchy); a later such command (run in a pre-forked worker, no migration); a
verification run (`run_verifier`, its own cgroups each time).
Usage: `python bench/run_all.py cgroup_headroom`.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from evsys.records import SandboxSpec
from evsys.sandbox import LocalSandbox
from evsys.sandbox.local import cgsetup

ROUNDS = 6
PER_ROUND = 10
LAYOUTS = {"nested (headroom)": cgsetup.NESTED, "flat (before)": ()}


async def _ms(awaitable) -> float:
    t0 = time.perf_counter()
    await awaitable
    return (time.perf_counter() - t0) * 1000


async def one_sandbox(index: int) -> dict[str, float]:
    """Start, a first program, a later program, a verification run, stop: milliseconds of each."""
    t0 = time.perf_counter()
    sb = LocalSandbox(SandboxSpec(name=f"bench-headroom-{index}", memory_mb=256))
    await sb.start()
    start = (time.perf_counter() - t0) * 1000
    try:
        first = await _ms(sb.exec("/bin/true"))
        for _ in range(3):
            await sb.exec("/bin/true")
        later = await _ms(sb.exec("/bin/true"))
        verify = await _ms(sb.run_verifier(["/bin/true"], tests=b"", output_file="/logs/v.txt", user="root"))
    finally:
        t1 = time.perf_counter()
        await sb.stop()
    stop = (time.perf_counter() - t1) * 1000
    return {"start+stop": start + stop, "first program": first, "later program": later, "verifier": verify}


async def measure() -> dict:
    """Alternating rounds of PER_ROUND sandboxes per layout; medians per layout and figure."""
    async with LocalSandbox(SandboxSpec(name="bench-headroom-warm")):
        pass  # builds and caches the root layers once
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in LAYOUTS}
    for round_index in range(ROUNDS):
        for name, nested in LAYOUTS.items():
            cgsetup.NESTED = nested
            try:
                for k in range(PER_ROUND):
                    figures = await one_sandbox(round_index * 100 + k)
                    for key, value in figures.items():
                        samples[name].setdefault(key, []).append(value)
            finally:
                cgsetup.NESTED = LAYOUTS["nested (headroom)"]
    return {name: {k: round(statistics.median(v), 3) for k, v in f.items()} for name, f in samples.items()}


def print_table(results: dict) -> None:
    """One row per figure, the two layouts side by side."""
    names = list(results)
    print(f"{'median (ms)':24}" + "".join(f"{n:>20}" for n in names))
    for key in results[names[0]]:
        print(f"{key:24}" + "".join(f"{results[n][key]:20.3f}" for n in names))


async def main() -> dict:
    """Run the benchmark, print the table, return the figures."""
    results = await measure()
    print_table(results)
    return results


if __name__ == "__main__":
    asyncio.run(main())
