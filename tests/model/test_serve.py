"""`evsys model serve` over the local engine, exercised with the `openai` backend and raw HTTP (no mocks)."""

from __future__ import annotations

import json

import httpx
import pytest

from evsys.model import ContextOverflowError, SamplingParams, UnknownModelError, create_model_client
from evsys.testing.tiny_model import DEMO_BASH_TOOL as BASH_TOOL
from evsys.testing.tiny_model import DEMO_GREETING as GREETING
from evsys.testing.tiny_model import DEMO_GREETING_REPLY as GREETING_REPLY
from evsys.testing.tiny_model import DEMO_LIST_FILES as LIST_FILES

GREEDY = SamplingParams(temperature=0.0, max_tokens=40)


async def test_openai_backend_returns_same_tokens_as_in_process(tiny_client, tiny_server):
    """Same greedy request: identical prompt ids, completion ids and (to 1e-5) logprobs over HTTP."""
    remote = create_model_client("vllm:tiny", base_url=tiny_server)
    try:
        for messages, tools in ((GREETING, None), (LIST_FILES, [BASH_TOOL])):
            local = await tiny_client.complete(messages, tools=tools, params=GREEDY)
            served = await remote.complete(messages, tools=tools, params=GREEDY)
            assert served.prompt_token_ids == local.prompt_token_ids
            assert served.completion_token_ids == local.completion_token_ids
            assert max(abs(a - b) for a, b in zip(served.logprobs, local.logprobs, strict=True)) < 1e-5
            assert served.text == local.text and served.finish_reason == local.finish_reason
            assert served.usage == local.usage
    finally:
        await remote.aclose()


async def test_tool_calls_come_back_in_openai_shape(tiny_server):
    """The raw HTTP response carries OpenAI-shape tool_calls, vLLM-style token ids and logprobs.content."""
    body = {
        "model": "tiny",
        "messages": LIST_FILES,
        "tools": [BASH_TOOL],
        "temperature": 0,
        "logprobs": True,
        "return_token_ids": True,
    }
    async with httpx.AsyncClient() as http:
        response = (await http.post(f"{tiny_server}/chat/completions", json=body)).json()
    choice = response["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "bash", "arguments": '{"command": "ls"}'}
    assert (
        len(choice["token_ids"])
        == len(choice["logprobs"]["content"])
        == response["usage"]["completion_tokens"]
    )
    assert len(response["prompt_token_ids"]) == response["usage"]["prompt_tokens"]
    remote = create_model_client("vllm:tiny", base_url=tiny_server)
    done = await remote.complete(LIST_FILES, tools=[BASH_TOOL], params=GREEDY)
    await remote.aclose()
    assert done.tool_calls[0].arguments == {"command": "ls"}


async def test_models_endpoint_and_unknown_model(tiny_server):
    """/v1/models lists the served name; asking for another model is a 404 → UnknownModelError."""
    async with httpx.AsyncClient() as http:
        listed = (await http.get(f"{tiny_server}/models")).json()
    assert [m["id"] for m in listed["data"]] == ["tiny"]
    remote = create_model_client("vllm:not-this-one", base_url=tiny_server)
    with pytest.raises(UnknownModelError, match="not-this-one"):
        await remote.complete(GREETING, params=GREEDY)
    await remote.aclose()


async def test_context_overflow_through_the_server(tiny_server):
    """The server answers 400 context_length_exceeded; the client raises ContextOverflowError."""
    remote = create_model_client("vllm:tiny", base_url=tiny_server)
    with pytest.raises(ContextOverflowError, match="context window"):
        await remote.complete([{"role": "user", "content": "word " * 2000}], params=GREEDY)
    await remote.aclose()
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{tiny_server}/chat/completions",
            json={"model": "tiny", "messages": GREETING, "max_tokens": 100000, "stream": True},
        )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


async def test_bad_request_is_a_400_naming_the_field(tiny_server):
    """A malformed body gets OpenAI's error shape with the offending field named."""
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{tiny_server}/chat/completions", json={"model": "tiny", "messages": []})
        wrong = await http.post(
            f"{tiny_server}/chat/completions", json={"model": "tiny", "messages": GREETING, "temperature": -1}
        )
    assert response.status_code == 400 and "messages" in response.json()["error"]["message"]
    assert wrong.status_code == 400 and "temperature" in wrong.json()["error"]["message"]


async def test_text_completions_take_token_ids(tiny_client, tiny_server):
    """/v1/completions with a token-id prompt continues exactly like the in-process engine."""
    engine = await tiny_client.engine()
    _, prompt_ids = engine.render(GREETING, None)
    local = await tiny_client.complete_ids(prompt_ids, GREEDY)
    async with httpx.AsyncClient() as http:
        by_ids = await http.post(
            f"{tiny_server}/completions",
            json={
                "model": "tiny",
                "prompt": prompt_ids,
                "temperature": 0,
                "return_token_ids": True,
                "logprobs": 0,
            },
        )
        by_text = await http.post(
            f"{tiny_server}/completions",
            json={
                "model": "tiny",
                "prompt": engine.decode(prompt_ids),
                "temperature": 0,
                "return_token_ids": True,
            },
        )
    choice = by_ids.json()["choices"][0]
    assert choice["token_ids"] == local.completion_token_ids
    assert choice["text"] == GREETING_REPLY["content"]
    assert choice["logprobs"]["token_logprobs"] == pytest.approx(local.logprobs, abs=1e-5)
    assert by_text.json()["choices"][0]["token_ids"] == local.completion_token_ids


async def test_streaming_chat_matches_non_streaming(tiny_client, tiny_server):
    """SSE chunks reassemble into the same content, token ids and tool calls as a plain request."""
    for messages, tools in ((GREETING, None), (LIST_FILES, [BASH_TOOL])):
        local = await tiny_client.complete(messages, tools=tools, params=GREEDY)
        body = {"model": "tiny", "messages": messages, "tools": tools, "temperature": 0, "max_tokens": 40}
        body.update({"stream": True, "return_token_ids": True, "stream_options": {"include_usage": True}})
        chunks = []
        async with (
            httpx.AsyncClient() as http,
            http.stream("POST", f"{tiny_server}/chat/completions", json=body) as response,
        ):
            assert response.headers["content-type"].startswith("text/event-stream")
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    chunks.append(line.removeprefix("data: "))
        assert chunks[-1] == "[DONE]"
        events = [json.loads(c) for c in chunks[:-1]]
        assert events[0]["prompt_token_ids"] == local.prompt_token_ids
        choices = [e["choices"][0] for e in events if e["choices"]]
        content = "".join(c["delta"].get("content") or "" for c in choices)
        ids = [t for c in choices for t in c.get("token_ids", [])]
        assert content == local.text
        assert ids == local.completion_token_ids
        assert choices[-1]["finish_reason"] == local.finish_reason
        calls = [tc for c in choices for tc in c["delta"].get("tool_calls", [])]
        assert [tc["function"]["arguments"] for tc in calls] == [tc.raw_arguments for tc in local.tool_calls]
        assert events[-1]["usage"]["completion_tokens"] == len(local.completion_token_ids)


UNHONOURED = {
    "tool_choice": "any",
    "response_format": {"type": "grammar"},
    "frequency_penalty": 0.5,
    "logit_bias": {"42": 10},
    "best_of": 3,  # not an OpenAI chat parameter at all: unknown fields are refused too
}


@pytest.mark.parametrize("param", list(UNHONOURED))
async def test_parameters_serve_does_not_honour_are_refused_by_name(tiny_server, param):
    """Nothing is silently ignored: a 400 whose `param` names the field."""
    body = {"model": "tiny", "messages": GREETING, param: UNHONOURED[param]}
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{tiny_server}/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and param in error["message"] and "not supported" in error["message"]


async def test_honoured_forms_of_those_parameters_are_accepted(tiny_server):
    """tool_choice 'none' hides the tools; the defaults (auto, text, 0 penalties, user) pass."""
    url = f"{tiny_server}/chat/completions"
    plain = {
        "model": "tiny",
        "messages": LIST_FILES,
        "tools": [BASH_TOOL],
        "temperature": 0,
        "max_tokens": 40,
    }
    extras = {"tool_choice": "auto", "response_format": {"type": "text"}, "frequency_penalty": 0, "user": "u"}
    async with httpx.AsyncClient() as http:
        auto = (await http.post(url, json={**plain, **extras})).json()
        none = (await http.post(url, json={**plain, "tool_choice": "none"})).json()
    assert auto["choices"][0]["message"]["tool_calls"], auto
    assert none["usage"]["prompt_tokens"] < auto["usage"]["prompt_tokens"]  # the tool schemas were left out


async def test_n_samples_several_choices_of_one_prompt(tiny_client, tiny_server):
    """n=4 with a seed: four choices, choice i exactly what the engine samples with seed + i; usage counts the
    prompt once; the same for /v1/completions; stream with n > 1 is refused by name."""
    body = {
        "model": "tiny",
        "messages": GREETING,
        "n": 4,
        "seed": 7,
        "max_tokens": 12,
        "return_token_ids": True,
    }
    async with httpx.AsyncClient(timeout=120) as http:
        chat = (await http.post(f"{tiny_server}/chat/completions", json=body)).json()
        text = (
            await http.post(
                f"{tiny_server}/completions",
                json={
                    "model": "tiny",
                    "prompt": "hello",
                    "n": 3,
                    "seed": 1,
                    "max_tokens": 8,
                    "return_token_ids": True,
                },
            )
        ).json()
        streamed = await http.post(f"{tiny_server}/chat/completions", json={**body, "stream": True})
    assert [c["index"] for c in chat["choices"]] == [0, 1, 2, 3]
    for i, choice in enumerate(chat["choices"]):
        local = await tiny_client.complete(GREETING, params=SamplingParams(seed=7 + i, max_tokens=12))
        assert choice["token_ids"] == local.completion_token_ids
    generated = sum(len(c["token_ids"]) for c in chat["choices"])
    assert chat["usage"]["completion_tokens"] == generated
    assert chat["usage"]["prompt_tokens"] == len(chat["prompt_token_ids"])
    assert [c["index"] for c in text["choices"]] == [0, 1, 2]
    assert len({tuple(c["token_ids"]) for c in text["choices"]}) > 1  # seeds 1, 2, 3: different samples
    assert streamed.status_code == 400 and streamed.json()["error"]["param"] == "stream"
    assert "n > 1" in streamed.json()["error"]["message"]


async def test_top_logprobs_gives_each_tokens_most_likely_alternatives(tiny_server):
    """Greedy with top_logprobs=3: three alternatives per token, best first, the sampled token the best one;
    refused without logprobs and with stream."""
    body = {"model": "tiny", "messages": GREETING, "temperature": 0, "max_tokens": 8, "logprobs": True}
    async with httpx.AsyncClient(timeout=120) as http:
        answer = (await http.post(f"{tiny_server}/chat/completions", json={**body, "top_logprobs": 3})).json()
        without = await http.post(
            f"{tiny_server}/chat/completions", json={**body, "logprobs": False, "top_logprobs": 3}
        )
        streamed = await http.post(
            f"{tiny_server}/chat/completions", json={**body, "top_logprobs": 3, "stream": True}
        )
    content = answer["choices"][0]["logprobs"]["content"]
    assert content
    for entry in content:
        top = entry["top_logprobs"]
        assert len(top) == 3
        assert [t["logprob"] for t in top] == sorted((t["logprob"] for t in top), reverse=True)
        assert top[0]["id"] == entry["id"] and top[0]["logprob"] == pytest.approx(entry["logprob"])
    assert without.status_code == 400 and "top_logprobs needs logprobs" in without.json()["error"]["message"]
    assert streamed.status_code == 400 and streamed.json()["error"]["param"] == "top_logprobs"
