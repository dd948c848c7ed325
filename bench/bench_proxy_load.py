"""The recording model proxy under a JSON flood (issue 38): one session sends eight bodies at once, each just
under the 32 MiB body limit, of `[{},{},...]` (the most Python objects a body that size can make), while
another session's harness keeps making small chat calls; then the same with eight valid chat requests at the
JSON value limit (what an attacker can still send within the limits).

The proxy runs in its own process (tests/model/proxy_process.py, a fixed-reply model), measured twice in the
same run: with its limits (a session's bodies in flight, bytes in flight, JSON values per body) and without
them (`--unbounded`: the limits before issue 38). Figures: the attack's answers, its span (first request to
last answer), the proxy's peak resident memory above where it stood (VmHWM - VmRSS, /proc/PID/status), and
the innocent session's call latency alone (median of 50) and during the attack (median, max, count).

Usage: `python bench/bench_proxy_load.py` or `python bench/run_all.py proxy_load`.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
TESTS = BENCH_DIR.parent / "tests"
sys.path.insert(0, str(TESTS))

from load_attacks import Reply, empty_objects, flood_beside, post_raw  # noqa: E402

MIB = 1 << 20
ATTACKERS = 8
CHAT = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
# the two floods: the most objects under the 32 MiB body limit, and the most a valid request may hold within
# the JSON value limit (83,000 messages: ~249,000 values, 2.8 MB), which is parsed, recorded and answered
FLOODS = {
    "[{},...] 32 MiB": empty_objects(32 * MIB - 1022),
    "valid, 249k values": json.dumps(
        {"model": "m", "messages": json.loads(CHAT)["messages"] * 83_000}
    ).encode(),
}


def _start(tmp: str, *flags: str) -> tuple[subprocess.Popen, dict]:
    env = {
        **os.environ,
        "PYTHONPATH": f"{BENCH_DIR.parent / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    cmd = [sys.executable, str(TESTS / "model" / "proxy_process.py"), tmp, *flags]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    return proc, json.loads(proc.stdout.readline())


def _call(info: dict, session: int, body: bytes) -> Reply:
    headers = {"Authorization": f"Bearer {info['keys'][session]}"}
    return post_raw(info["sockets"][session], "/v1/chat/completions", body, headers)


def _timed(call) -> float:
    sent = time.monotonic()
    return call().at - sent


def _measure(body: bytes, *flags: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        proc, info = _start(tmp, *flags)
        try:
            alone_waits = [_timed(lambda: _call(info, 1, CHAT)) for _ in range(50)]
            flood = flood_beside(
                lambda: _call(info, 0, body), ATTACKERS, lambda: _call(info, 1, CHAT), info["pid"]
            )
        finally:
            proc.stdin.write("quit\n")
            proc.stdin.close()
            proc.wait(60)
    waits = flood.innocent_waits()
    return {
        "attack_statuses": dict(Counter(str(r.status) for r in flood.attack)),
        "attack_span_s": round(flood.last_attack_reply - flood.started, 2),
        "rss_before_mib": round(flood.rss_before / MIB),
        "rss_growth_mib": round(flood.rss_growth / MIB),
        "innocent_alone_median_ms": round(statistics.median(alone_waits) * 1000, 1),
        "innocent_during_median_ms": round(statistics.median(waits) * 1000, 1),
        "innocent_during_max_ms": round(max(waits) * 1000, 1),
        "innocent_calls_during": len(waits),
        "innocent_statuses": dict(Counter(str(r.status) for _, r in flood.innocent)),
    }


async def main() -> dict:
    """Measure each flood with the proxy's limits and without them; print them side by side."""
    results = {}
    for flood, body in FLOODS.items():
        for name, flags in (("limits", ()), ("unbounded", ("--unbounded",))):
            results[f"{flood}, {name}"] = await asyncio.to_thread(_measure, body, *flags)
    columns = list(results)
    print(f"{'figure':26} " + " ".join(f"{n:>28}" for n in columns))
    for key in results[columns[0]]:
        print(f"{key:26} " + " ".join(f"{results[c][key]!s:>28}" for c in columns))
    return results


if __name__ == "__main__":
    asyncio.run(main())
