"""A recording model proxy in its own process, for load tests that measure its memory and descriptors.

    python proxy_process.py DIR [--nofile N] [--session-connections N] [--header-timeout S] [--no-reserve]
                                [--unbounded]

Starts a `ModelProxy` on 127.0.0.1 (TCP) with two sessions, each on its own unix socket in DIR (`a.sock`,
`b.sock`), and prints one JSON line: url, pid, the sessions' keys and sockets. The model client answers
every call with a fixed reply (these tests are about the proxy's HTTP side). Then it obeys stdin, one
command a line: `write JOB_DIR TRIAL` writes a trial through `JobStore.finish_trial` (prints `ok` or the
error), `quit` stops. `--nofile N` sets RLIMIT_NOFILE to N (soft and hard) first, so the descriptor reserve
is tested at a size a test can exhaust; `--no-reserve` turns the reserve off (the attack's control);
`--unbounded` lifts the sessions' body budgets (the JSON flood's control: the limits before issue 38)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
from pathlib import Path

from evsys.engine import JobStore
from evsys.model.base import Completion
from evsys.model.proxy import ModelProxy
from evsys.model.proxy.intake import UNBOUNDED, BodyBudget
from evsys.records import AgentInfo, PhaseTimings, TrajectoryRecorder, TrialResult
from evsys.util.httpserver import ConnectionLimits

REPLY = "the proxy still answers"


class FixedReplyClient:
    """A model client that answers every call with `REPLY`."""

    model = "fixed"

    async def complete(self, messages, *, tools=None, params=None) -> Completion:
        return Completion(text=REPLY, model=self.model)

    async def aclose(self) -> None:
        return None


async def _write(job_dir: str, trial: str) -> str:
    result = TrialResult(
        trial_name=trial,
        task_name="t",
        task_path="/t",
        dataset="d",
        agent="innocent",
        attempt=1,
        timing=PhaseTimings(),
    )
    try:
        trajectory = TrajectoryRecorder(trial, AgentInfo(name=result.agent)).build()
        await JobStore(Path(job_dir)).finish_trial(trajectory, result)
    except OSError as exc:
        return f"error {exc}"
    return "ok"


async def main(args: argparse.Namespace) -> None:
    limits = ConnectionLimits(
        max_connections=args.session_connections, header_timeout_sec=args.header_timeout
    )
    budget = UNBOUNDED if args.unbounded else BodyBudget()
    async with ModelProxy(FixedReplyClient(), session_limits=limits, body_budget=budget) as proxy:
        a, b = proxy.open_session(), proxy.open_session()
        sockets = [
            await proxy.open_session_socket(s, Path(args.dir) / f"{n}.sock") for n, s in (("a", a), ("b", b))
        ]
        info = {
            "url": proxy.url,
            "pid": os.getpid(),
            "keys": [a.key, b.key],
            "sockets": [str(p) for p in sockets],
        }
        print(json.dumps(info), flush=True)
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            command, *rest = line.split()
            if command == "quit":
                break
            print(await _write(*rest), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--nofile", type=int)
    parser.add_argument("--session-connections", type=int, default=32)
    parser.add_argument("--header-timeout", type=float, default=10.0)
    parser.add_argument("--unbounded", action="store_true", help="the body limits before issue 38")
    parser.add_argument("--no-reserve", action="store_true", help="accept into the descriptor reserve too")
    parsed = parser.parse_args()
    if parsed.no_reserve:  # the attack's positive control: what happens without the reserve
        import evsys.util.httpserver

        evsys.util.httpserver.in_reserve = lambda fd: False
    if parsed.nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE, (parsed.nofile, parsed.nofile))
    asyncio.run(main(parsed))
