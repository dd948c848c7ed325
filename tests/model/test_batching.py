"""Continuous batching in the local engine: concurrent requests share forward passes and stay token-exact."""

from __future__ import annotations

import asyncio

import pytest

from evsys.model import ContextOverflowError, SamplingParams
from evsys.testing.tiny_model import DEMO_BASH_TOOL, DEMO_GREETING, DEMO_LIST_FILES

PROMPTS = [
    (DEMO_GREETING, None),
    (DEMO_LIST_FILES, [DEMO_BASH_TOOL]),
    ([{"role": "user", "content": "Write a haiku about sandboxes and tokens."}], None),
    ([{"role": "user", "content": "x"}], [DEMO_BASH_TOOL]),
]


async def test_batched_greedy_equals_one_at_a_time(tiny_client):
    """Prompts of different lengths generated together give the same tokens as generated alone."""
    params = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    alone = [await tiny_client.complete(m, tools=t, params=params) for m, t in PROMPTS]
    scheduler = tiny_client.shared.scheduler
    together = await asyncio.gather(
        *(tiny_client.complete(m, tools=t, params=params) for m, t in PROMPTS * 3)
    )
    assert scheduler.max_batch_seen > 1, "requests were not batched"
    for i, done in enumerate(together):
        reference = alone[i % len(PROMPTS)]
        assert done.completion_token_ids == reference.completion_token_ids
        assert done.logprobs == pytest.approx(reference.logprobs, abs=1e-4)


async def test_batched_sampling_keeps_logprob_fidelity(tiny_client):
    """Seeded sampling in a batch: each row's logprobs match teacher forcing and its seed is honoured."""
    engine = await tiny_client.engine()
    runs = [SamplingParams(temperature=1.5, seed=s, max_tokens=25, ignore_eos=True) for s in range(6)]
    chat = PROMPTS[2][0]
    first = await asyncio.gather(*(tiny_client.complete(chat, params=p) for p in runs))
    second = await asyncio.gather(*(tiny_client.complete(chat, params=p) for p in reversed(runs)))
    for done, again in zip(first, reversed(second), strict=True):
        assert done.completion_token_ids == again.completion_token_ids
        rescored = engine.score(done.prompt_token_ids, done.completion_token_ids)
        assert max(abs(a - b) for a, b in zip(rescored, done.logprobs, strict=True)) < 1e-3
    assert len({tuple(d.completion_token_ids) for d in first}) > 1


async def test_one_bad_request_does_not_disturb_the_batch(tiny_client):
    """An overflowing request fails alone; short, stopped and cancelled neighbours finish correctly."""
    normal = SamplingParams(temperature=0, max_tokens=20)
    expected = await tiny_client.complete(DEMO_GREETING, params=normal)
    doomed = asyncio.ensure_future(
        tiny_client.complete(DEMO_GREETING, params=SamplingParams(max_tokens=500, ignore_eos=True))
    )
    results = await asyncio.gather(
        tiny_client.complete(DEMO_GREETING, params=normal),
        tiny_client.complete([{"role": "user", "content": "word " * 2000}], params=normal),
        tiny_client.complete(DEMO_GREETING, params=normal.model_copy(update={"max_tokens": 2})),
        tiny_client.complete(DEMO_GREETING, params=normal.model_copy(update={"stop": ["help"]})),
        return_exceptions=True,
    )
    doomed.cancel()
    assert results[0].completion_token_ids == expected.completion_token_ids
    assert isinstance(results[1], ContextOverflowError)
    assert results[2].finish_reason == "length" and len(results[2].completion_token_ids) == 2
    assert results[3].finish_reason == "stop" and results[3].text == "Hello! How can I "
    after = await tiny_client.complete(DEMO_GREETING, params=normal)
    assert after.completion_token_ids == expected.completion_token_ids
