"""`evsys run`'s progress: a live bar on a terminal, plain `progress:` lines on stderr otherwise (CI logs).

Both start only once the job is prepared (tasks planned, job directory ready), so a pre-flight or plan error
is the only thing printed. Each shows trials done of planned, running, errored (cancelled trials are counted
apart), the mean reward so far per agent, what the first few running trials are doing (sandbox start, image,
agent turn N, verifier: the job's live events), elapsed time and an ETA from the rate of this run's trials;
the bar also names the image builds running (from the job's `BuildProgress` events).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from rich.console import Console

from evsys.cli.markup import shown

if TYPE_CHECKING:
    from evsys.engine.events import BuildProgress
    from evsys.engine.job import Job

DEFAULT_INTERVAL = 10.0
REFRESH = 0.2
BUILD_QUIET_SEC = 600.0  # a build that printed nothing for this long is not shown as running
SHOWN_TRIALS = 3  # running trials whose current phase the progress display names


def clock(seconds: float) -> str:
    """`H:MM:SS`."""
    seconds = max(0, round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def eta_seconds(planned: int, done: int, done_at_start: int, elapsed: float) -> float | None:
    """Seconds left at this run's rate (trials finished since it started per second); None before the first
    trial of this run finishes."""
    finished_here = done - done_at_start
    if finished_here <= 0 or elapsed <= 0:
        return None
    return max(0, planned - done) * elapsed / finished_here


def describe(status: dict[str, Any]) -> str:
    """`running 2 | errored 1 | cancelled 0 | mean reward loop 0.500, oracle 1.000`."""
    means = status["mean_reward_by_agent"]
    if len(means) <= 1:
        mean = next(iter(means.values()), None)
        reward = f"mean reward {'-' if mean is None else f'{mean:.3f}'}"
    else:
        reward = "mean reward " + ", ".join(f"{label} {value:.3f}" for label, value in means.items())
    parts = [f"running {status['running']}", f"errored {status['errored']}"]
    if status["cancelled"]:
        parts.append(f"cancelled {status['cancelled']}")
    now = doing(status.get("activity") or {})
    return " | ".join([*parts, reward, *([now] if now else [])])


def doing(activity: dict[str, str]) -> str:
    """`now: a__loop__1 agent turn 2, b__loop__1 verifier (+3 more)`: what running trials do (the first few,
    by name); empty when none has said."""
    if not activity:
        return ""
    names = sorted(activity)
    shown_now = ", ".join(f"{name} {activity[name]}" for name in names[:SHOWN_TRIALS])
    more = f" (+{len(names) - SHOWN_TRIALS} more)" if len(names) > SHOWN_TRIALS else ""
    return f"now: {shown_now}{more}"


class BuildActivity:
    """The image builds running, from the job's `BuildProgress` events: each task's last line."""

    def __init__(self) -> None:
        self.lines: dict[str, tuple[float, str]] = {}

    def on_event(self, event: BuildProgress) -> None:
        """Note a build's line, or forget its build once it ended."""
        if event.line is None:
            self.lines.pop(event.task, None)
        else:
            self.lines[event.task] = (time.monotonic(), event.line)

    def running(self) -> list[str]:
        """`task: last line` per build running (one that printed something in the last 10 minutes)."""
        now = time.monotonic()
        return [
            f"{task}: {line}" for task, (at, line) in sorted(self.lines.items()) if now - at < BUILD_QUIET_SEC
        ]

    def shown(self) -> str:
        """` | building <first build> (+N)`, or nothing when no build runs."""
        building = self.running()
        if not building:
            return ""
        more = f" (+{len(building) - 1})" if building[1:] else ""
        return f" | building {shown(building[0][:90])}{more}"


class _Tracker:
    """What the progress displays share: the job's status plus timing since the job was prepared, and the
    builds running (subscribed to the job's events while the display lives)."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.started: float | None = None
        self.done_at_start = 0
        self.builds = BuildActivity()

    def status(self) -> dict[str, Any] | None:
        """The job's status, or None while it is still being prepared."""
        if not self.ready():
            return None
        return self.job.status()

    def ready(self) -> bool:
        """Whether the job is past its preparation (the clock starts then); cheap: no counting of trials."""
        if not self.job.prepared:
            return False
        if self.started is None:
            self.started, self.done_at_start = time.monotonic(), len(self.job.results)
        return True

    def timing(self, status: dict[str, Any]) -> str:
        assert self.started is not None, "timing is asked only once the job is prepared"
        elapsed = time.monotonic() - self.started
        left = eta_seconds(status["planned"], status["done"], self.done_at_start, elapsed)
        return f"elapsed {clock(elapsed)} | ETA {'-' if left is None else clock(left)}"

    def line(self, status: dict[str, Any]) -> str:
        """The plain progress line."""
        done = f"{status['done']}/{status['planned']} trials"
        return f"progress: {done} | {describe(status)} | {self.timing(status)}"


@contextlib.asynccontextmanager
async def live_progress(job: Job, out: Console, interval: float = DEFAULT_INTERVAL) -> AsyncIterator[None]:
    """Show the job's progress while it runs: a live bar on a terminal, else a plain line every `interval`
    seconds (and one at the end)."""
    tracker = _Tracker(job)
    display = _Bar(tracker, out) if out.is_terminal else _Lines(tracker, out, interval)
    unsubscribe = job.events.subscribe(tracker.builds.on_event)
    watcher = asyncio.create_task(display.watch())
    try:
        yield
    finally:
        unsubscribe()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        display.finish()


class _Lines:
    """Plain lines: one every `interval` seconds once the job is prepared, and one when it ends."""

    def __init__(self, tracker: _Tracker, out: Console, interval: float) -> None:
        self.tracker, self.out, self.interval = tracker, out, interval

    async def watch(self) -> None:
        """Print a line each interval (the first one interval after the job is prepared)."""
        last: float | None = None
        while True:
            await asyncio.sleep(REFRESH)
            if not self.tracker.ready():  # the status is counted only when a line is printed
                continue
            now = time.monotonic()
            if last is not None and now - last >= self.interval:
                self._print()
            if last is None or now - last >= self.interval:
                last = now

    def finish(self) -> None:
        """The final line (nothing when the job never got past its preparation)."""
        self._print()

    def _print(self) -> None:
        status = self.tracker.status()
        if status is not None:
            self.out.print(shown(self.tracker.line(status)), highlight=False, soft_wrap=True)


class _Bar:
    """A rich progress bar, started once the job is prepared."""

    def __init__(self, tracker: _Tracker, out: Console) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.tracker = tracker
        self.progress = Progress(
            TextColumn("[bold]{task.fields[job]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            console=out,
            transient=False,
        )
        name = shown(tracker.job.config.job_name)
        self.bar = self.progress.add_task("trials", total=None, job=name, detail="")
        self.started = False

    async def watch(self) -> None:
        """Start the bar once the job is prepared, then refresh it."""
        while True:
            if self._update() and not self.started:
                self.progress.start()
                self.started = True
            await asyncio.sleep(REFRESH)

    def finish(self) -> None:
        """Draw the final state and stop (nothing was drawn if the job never got past its preparation)."""
        if self.started:
            self._update()
            self.progress.stop()

    def _update(self) -> bool:
        status = self.tracker.status()
        if status is None:
            return False
        detail = f"{shown(describe(status))} | {self.tracker.timing(status)}{self.tracker.builds.shown()}"
        self.progress.update(
            self.bar, total=status["planned"] or None, completed=status["done"], detail=detail
        )
        return True
