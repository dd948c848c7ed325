"""Harness episodes in process: the serving state `evsys serve --harness NAME` drives (evsys.engine.episodes)
over examples/tasks, recording into a temporary job, with the test's model client lent to it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from evsys.agent.harness.events import HarnessEvent
from evsys.engine.episodes import EpisodeLimits, ServeSettings, Session, build_service
from evsys.engine.episodes.protocol import CallToolAction, MessageAction, ResetParams, ServedObservation
from evsys.rollouts import BorrowedModelClient

EXAMPLES = Path(__file__).parents[2] / "examples" / "tasks"
TASK = "create-file"
HARNESS_ROOT = b"/opt/evsys-harness/"


def harness_processes() -> list[str]:
    """Command lines of processes on this machine running something from a harness install tree."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes()
        except OSError:
            continue
        if HARNESS_ROOT in text:
            found.append(text.replace(b"\0", b" ").decode("utf-8", "replace"))
    return found


@asynccontextmanager
async def harness_session(
    jobs_dir: Path,
    harness: str,
    client: Any,
    *,
    max_steps: int = 100,
    step_timeout_sec: float = 120.0,
    harness_options: dict[str, Any] | None = None,
) -> AsyncIterator[Session]:
    """One session of a harness-mode service (`harness`: a registered harness agent's name, with
    `harness_options`); every episode it starts is recorded under `jobs_dir/harness` and the service is
    closed afterwards."""
    limits = EpisodeLimits(max_steps=max_steps, step_timeout_sec=step_timeout_sec)
    settings = ServeSettings(harness=harness, harness_options=dict(harness_options or {}), limits=limits)
    service = await asyncio.to_thread(
        build_service, EXAMPLES, settings, job_name="harness", jobs_dir=jobs_dir
    )
    await service.start()
    service.model_client = BorrowedModelClient(client)
    try:
        yield service.open_session("test")
    finally:
        await service.close()


async def reset(session: Session) -> ServedObservation:
    """Start an episode of the example task."""
    return await session.reset(ResetParams(task=TASK))


async def say(
    session: Session, message: str, live: list[HarnessEvent] | None = None
) -> tuple[ServedObservation, float | None, bool]:
    """One harness turn; with `live`, its events are streamed into it as they happen."""
    sink = None
    if live is not None:

        async def sink(event: HarnessEvent) -> None:
            live.append(event)

    return await session.step(MessageAction(message=message), sink)


async def submit(session: Session) -> tuple[ServedObservation, float | None, bool]:
    """End the episode: the verifier scores the sandbox and the episode is recorded."""
    return await session.step(CallToolAction(tool_name="submit"))


def requests_messages(events: list[dict[str, Any]]) -> list[int]:
    """How many messages each model request of a turn carried (its LLM_REQUEST events)."""
    return [e["data"]["messages"] for e in events if e["type"] == "llm_request"]
