"""A job's event stream (evsys.engine.events): every subscriber gets every event in order, a failing one
harms no other, and an unsubscribed one gets nothing more."""

from __future__ import annotations

from evsys.cli.progress import BuildActivity
from evsys.engine.events import BuildProgress, JobEvents


def test_every_subscriber_gets_the_events_even_when_one_fails():
    events = JobEvents()
    first: list[BuildProgress] = []
    second: list[BuildProgress] = []

    def broken(event: BuildProgress) -> None:
        raise RuntimeError("a display that crashed")

    events.subscribe(first.append)
    events.subscribe(broken)
    unsubscribe = events.subscribe(second.append)
    events.emit(BuildProgress(task="a", line="STEP 1/2: FROM debian"))
    unsubscribe()
    events.emit(BuildProgress(task="a"))
    assert [e.line for e in first] == ["STEP 1/2: FROM debian", None]
    assert [e.line for e in second] == ["STEP 1/2: FROM debian"]


def test_the_progress_display_shows_running_builds_until_they_end():
    builds = BuildActivity()
    builds.on_event(BuildProgress(task="b", line="STEP 2/3: RUN make"))
    builds.on_event(BuildProgress(task="a", line="STEP 1/3: FROM debian"))
    assert builds.shown() == " | building a: STEP 1/3: FROM debian (+1)"
    builds.on_event(BuildProgress(task="a"))
    assert builds.shown() == " | building b: STEP 2/3: RUN make"
    builds.on_event(BuildProgress(task="b"))
    assert builds.shown() == ""
