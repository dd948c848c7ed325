"""The agent timeout leaves out time a model request waits for the local engine (its load, its queue)."""

from __future__ import annotations

import asyncio

import pytest

from evsys.engine.trial.pause import PausableTimeout
from evsys.model.waiting import model_wait, pausing


async def test_a_model_wait_longer_than_the_limit_does_not_time_out():
    async with asyncio.timeout(0.3) as timeout:
        clock = PausableTimeout(timeout)
        with pausing(clock):
            end = model_wait()
            await asyncio.sleep(0.6)  # waiting for the engine: the clock is stopped
            end()
            end()  # ending twice is harmless
            await asyncio.sleep(0.05)
    assert clock.paused_s >= 0.6


async def test_without_a_model_wait_the_same_time_times_out():  # the control
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3) as timeout:
            with pausing(PausableTimeout(timeout)):
                await asyncio.sleep(0.6)


async def test_time_after_the_wait_still_counts():
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3) as timeout:
            with pausing(PausableTimeout(timeout)):
                end = model_wait()
                await asyncio.sleep(0.1)
                end()
                await asyncio.sleep(0.6)


async def test_tasks_the_agent_starts_pause_the_same_clock():
    async with asyncio.timeout(0.3) as timeout:
        clock = PausableTimeout(timeout)
        with pausing(clock):

            async def call_model() -> None:
                end = model_wait()
                await asyncio.sleep(0.6)
                end()

            await asyncio.gather(call_model(), call_model())
    assert clock.waiting == 0
