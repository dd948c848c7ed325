"""The in-process engine: token fidelity, determinism, stopping, tool calls and context overflow."""

from __future__ import annotations

import asyncio

import pytest

from evsys.model import ContextOverflowError, SamplingParams, create_model_client
from evsys.model.render import HERMES_CHATML_TEMPLATE
from evsys.testing.tiny_model import DEMO_BASH_TOOL as BASH_TOOL
from evsys.testing.tiny_model import DEMO_GREETING as GREETING
from evsys.testing.tiny_model import DEMO_GREETING_REPLY as GREETING_REPLY
from evsys.testing.tiny_model import DEMO_LIST_FILES as LIST_FILES

SAMPLED = SamplingParams(temperature=1.0, seed=1234, max_tokens=40)
GREEDY = SamplingParams(temperature=0.0, max_tokens=40)


async def test_sampled_logprobs_match_teacher_forcing(tiny_client):
    """Re-scoring the recorded prompt+completion reproduces each sampled token's logprob within 1e-3."""
    done = await tiny_client.complete(LIST_FILES, tools=[BASH_TOOL], params=SAMPLED)
    engine = await tiny_client.engine()
    assert done.completion_token_ids and len(done.logprobs) == len(done.completion_token_ids)
    rescored = engine.score(done.prompt_token_ids, done.completion_token_ids)
    worst = max(abs(a - b) for a, b in zip(rescored, done.logprobs, strict=True))
    assert worst < 1e-3, f"recorded logprobs drift from teacher forcing by {worst}"
    assert all(lp <= 0.0 for lp in done.logprobs)


async def test_prompt_ids_are_the_tokenised_template(tiny_client):
    """prompt_token_ids == tokenizer(apply_chat_template(messages, tools, add_generation_prompt=True))."""
    done = await tiny_client.complete(LIST_FILES, tools=[BASH_TOOL], params=GREEDY)
    engine = await tiny_client.engine()
    text = engine.tokenizer.apply_chat_template(
        LIST_FILES,
        tools=[BASH_TOOL],
        add_generation_prompt=True,
        tokenize=False,
        chat_template=HERMES_CHATML_TEMPLATE,
    )
    assert text.endswith("<|im_start|>assistant\n") and '"name": "bash"' in text
    assert done.prompt_token_ids == engine.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert done.usage.prompt_tokens == len(done.prompt_token_ids)


async def test_completion_ids_decode_to_the_text(tiny_client):
    """The completion ids (ending in EOS) decode exactly to raw_text; the trained greeting comes back."""
    done = await tiny_client.complete(GREETING, params=GREEDY)
    engine = await tiny_client.engine()
    assert done.finish_reason == "stop"
    assert done.completion_token_ids[-1] in engine.eos_ids
    assert engine.decode(done.completion_token_ids[:-1]) == done.raw_text
    assert done.text == GREETING_REPLY["content"]
    assert done.usage.completion_tokens == len(done.completion_token_ids)


async def test_same_seed_same_tokens_and_greedy_is_deterministic(tiny_client):
    """A seeded request and a greedy request each give identical tokens when repeated."""
    params = SAMPLED.model_copy(update={"max_tokens": 24})
    first, second = [await tiny_client.complete(GREETING, params=params) for _ in range(2)]
    assert first.completion_token_ids == second.completion_token_ids
    assert first.logprobs == second.logprobs
    other = await tiny_client.complete(
        GREETING, params=params.model_copy(update={"seed": 99, "temperature": 3.0})
    )
    assert other.completion_token_ids != first.completion_token_ids
    greedy = [await tiny_client.complete(GREETING, params=GREEDY) for _ in range(2)]
    assert greedy[0].completion_token_ids == greedy[1].completion_token_ids


async def test_max_tokens_gives_length_and_stop_string_cuts_text(tiny_client):
    """max_tokens ends with finish_reason=length; a stop string ends generation and is cut from the text."""
    short = await tiny_client.complete(GREETING, params=GREEDY.model_copy(update={"max_tokens": 3}))
    assert short.finish_reason == "length" and len(short.completion_token_ids) == 3
    stopped = await tiny_client.complete(GREETING, params=GREEDY.model_copy(update={"stop": ["How"]}))
    assert stopped.finish_reason == "stop"
    assert stopped.text == "Hello! "
    assert "How" in stopped.raw_text


async def test_trained_tool_call_is_parsed(tiny_client):
    """The tiny model's Hermes tool call comes back as a parsed ToolCall with finish_reason tool_calls."""
    done = await tiny_client.complete(LIST_FILES, tools=[BASH_TOOL], params=GREEDY)
    assert done.finish_reason == "tool_calls"
    assert len(done.tool_calls) == 1
    call = done.tool_calls[0]
    assert (call.function_name, call.arguments, call.parse_error) == ("bash", {"command": "ls"}, None)
    assert call.tool_call_id.startswith("call_")
    assert done.to_message()["tool_calls"][0]["function"] == {
        "name": "bash",
        "arguments": '{"command": "ls"}',
    }


async def test_context_overflow_is_raised_before_generating(tiny_client):
    """A prompt that cannot fit with max_tokens raises ContextOverflowError naming the numbers."""
    engine = await tiny_client.engine()
    long_chat = [{"role": "user", "content": "word " * 2000}]
    with pytest.raises(ContextOverflowError) as info:
        await tiny_client.complete(long_chat, params=GREEDY)
    assert str(engine.context_window) in str(info.value)
    assert info.value.prompt_tokens > engine.context_window
    near = [{"role": "user", "content": "hi"}]
    with pytest.raises(ContextOverflowError, match="max_tokens 5000"):
        await tiny_client.complete(near, params=GREEDY.model_copy(update={"max_tokens": 5000}))


async def test_concurrent_requests_are_all_served_exactly(tiny_client):
    """Eight concurrent greedy requests give the same tokens as one alone (the engine serialises them)."""
    alone = await tiny_client.complete(GREETING, params=GREEDY)
    many = await asyncio.gather(*(tiny_client.complete(GREETING, params=GREEDY) for _ in range(8)))
    assert all(m.completion_token_ids == alone.completion_token_ids for m in many)


async def test_factory_builds_local_client_and_rejects_missing_dir(tiny_model_dir, tmp_path):
    """`local:/path` builds a working client; a path without a model gives a clear UnknownModelError."""
    from evsys.model import UnknownModelError

    client = create_model_client(f"local:{tiny_model_dir}")
    done = await client.complete(GREETING, params=GREEDY)
    assert done.text == GREETING_REPLY["content"]
    assert done.model == f"local:{tiny_model_dir}"
    missing = create_model_client(f"local:{tmp_path / 'nothing'}")
    with pytest.raises(UnknownModelError, match="nothing"):
        await missing.complete(GREETING, params=GREEDY)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UnknownModelError, match=r"config\.json"):
        await create_model_client(f"local:{tmp_path / 'empty'}").complete(GREETING, params=GREEDY)
