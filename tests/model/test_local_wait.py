"""The local engine reports when a request waits for it (load, queue) to whoever bounds the caller's time."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from evsys.model.base import SamplingParams
from evsys.model.local.client import LocalModelClient
from evsys.model.waiting import pausing

SAFETY_TIMEOUT = 120


class RecordingClock:
    """Records when each request's wait begins and ends."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.changed = asyncio.Event()

    def begin_wait(self):
        number = sum(1 for kind, _ in self.events if kind == "begin")
        self._add(("begin", number))
        return lambda: self._add(("end", number))

    def _add(self, event: tuple[str, int]) -> None:
        if event not in self.events:
            self.events.append(event)
            self.changed.set()

    async def until(self, event: tuple[str, int]) -> None:
        async with asyncio.timeout(SAFETY_TIMEOUT):  # only guards against a hung test
            while event not in self.events:
                self.changed.clear()
                await self.changed.wait()


async def test_a_request_queued_behind_another_waits_until_its_prefill_starts(tiny_model_dir: Path, tmp_path):
    model = tmp_path / "model"  # its own engine, one sequence at a time, so the second request queues
    shutil.copytree(tiny_model_dir, model)
    client = LocalModelClient(str(model), max_batch_size=1)
    engine = await client.engine()
    ids = engine.encode("hello hello")
    clock = RecordingClock()
    with pausing(clock):
        long = SamplingParams(max_tokens=min(150, engine.context_window - len(ids)), ignore_eos=True)
        first = asyncio.ensure_future(client.shared.generate(ids, long))
        await clock.until(("end", 0))  # the first request reached the engine
        second = asyncio.ensure_future(client.shared.generate(ids, SamplingParams(max_tokens=2)))
        await clock.until(("begin", 1))
        assert not first.done() and ("end", 1) not in clock.events  # still queued behind the first
        await first
        await second
    assert ("end", 1) in clock.events
    client.shared.close()
