"""`[environment.healthcheck]`: wait until the environment is ready before the agent is set up.

Docker's HEALTHCHECK semantics, as Harbor 0.25 runs them: the command runs as root in the sandbox (`bash -c`,
each attempt bounded by `timeout_sec`) until it exits 0. During `start_period_sec` after the first attempt,
failures do not count and attempts are `start_interval_sec` apart; after it, attempts are `interval_sec`
apart and `retries` consecutive failures fail the trial (`healthcheck_failed`, naming the command and its
last output).
"""

from __future__ import annotations

import asyncio
import time

from evsys.records import ExecResult
from evsys.sandbox.base import Sandbox
from evsys.task.models import HealthcheckConfig


class HealthcheckFailed(Exception):
    """The environment never became healthy."""


def _describe(result: ExecResult) -> str:
    if result.timed_out:
        return "the last attempt timed out"
    output = (result.stderr.strip() or result.stdout.strip())[-300:]
    return f"the last attempt exited {result.exit_code}" + (f": {output}" if output else "")


async def await_healthy(sandbox: Sandbox, check: HealthcheckConfig) -> int:
    """Run `check` until it passes; the number of attempts it took. `HealthcheckFailed` after `retries`
    consecutive failures past the start period."""
    start_period_end = time.monotonic() + check.start_period_sec
    failures = attempts = 0
    while True:
        result = await sandbox.exec(check.command, user="root", timeout=check.timeout_sec)
        attempts += 1
        if result.exit_code == 0 and not result.timed_out:
            return attempts
        if time.monotonic() < start_period_end:
            await asyncio.sleep(check.start_interval_sec)
            continue
        failures += 1
        if failures >= check.retries:
            raise HealthcheckFailed(
                f"task.toml:environment.healthcheck: '{check.command}' failed {failures} times in a row "
                f"after the start period ({_describe(result)})"
            )
        await asyncio.sleep(check.interval_sec)
