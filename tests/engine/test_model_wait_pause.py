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


async def test_a_task_started_in_the_block_that_outlives_it_waits_harmlessly():
    """A server started during one phase (a harness's model proxy) keeps serving after that phase's limit
    ended: its waits must not touch the finished timeout."""
    from evsys.engine.trial.state import TrialState

    started = asyncio.Event()
    release = asyncio.Event()

    async def server() -> None:
        started.set()
        await release.wait()
        end = model_wait()  # long after the phase's block ended
        end()

    holder: list[asyncio.Task] = []

    async def phase() -> None:
        holder.append(asyncio.create_task(server()))
        await started.wait()

    state = TrialState.__new__(TrialState)  # only `timed` and the result's timing are used
    state.result = type("R", (), {"timing": type("T", (), {"setup": None})()})()
    await state.timed("setup", phase(), limit=5)
    release.set()
    await holder[0]  # raises if the finished timeout was rescheduled
