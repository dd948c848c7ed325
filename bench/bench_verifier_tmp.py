"""What the verifier's view of the agent's /tmp costs a verification run (local backend, issue 37 scope 3).

Per case of the agent's /tmp (empty; 1,000 small files; one 100 MB file) one sandbox (memory_mb=1024) is
filled once, then PER_CASE verification runs of `/bin/true` (`run_verifier`, each with its own mount
namespace, tmpfs and view of /tmp) are timed; the median and the spread are printed in milliseconds. Compare
two trees by running this file under each one's PYTHONPATH in turn (the daemon is built per source tree).
Usage: `python bench/run_all.py verifier_tmp`.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from evsys.records import SandboxSpec
from evsys.sandbox import LocalSandbox

PER_CASE = 15
CASES = {
    "empty /tmp": "true",
    "1,000 small files": "mkdir /tmp/many && cd /tmp/many && for i in $(seq 1000); do echo $i > f$i; done",
    "one 100 MB file": "head -c 100M /dev/urandom > /tmp/big",
}


async def one_case(name: str, fill: str) -> list[float]:
    """Milliseconds of each of PER_CASE verification runs over a /tmp filled by `fill`."""
    async with LocalSandbox(SandboxSpec(name="bench-verifier-tmp", memory_mb=1024)) as sb:
        filled = await sb.exec(fill, user="agent")
        if not filled.ok:
            raise RuntimeError(f"{name}: {filled.stderr}")
        samples = []
        for _ in range(PER_CASE):
            t0 = time.perf_counter()
            await sb.run_verifier(["/bin/true"], tests=b"", output_file="/logs/verifier/out.txt", user="root")
            samples.append((time.perf_counter() - t0) * 1000)
        return samples


async def main() -> dict:
    """Run every case; print and return median, min and max per case."""
    results = {}
    for name, fill in CASES.items():
        samples = await one_case(name, fill)
        median, low, high = statistics.median(samples), min(samples), max(samples)
        results[name] = {"median": round(median, 2), "min": round(low, 2), "max": round(high, 2)}
        print(f"{name:20} median {median:8.2f} ms  (min {low:.2f}, max {high:.2f})")
    return results


if __name__ == "__main__":
    asyncio.run(main())
