"""The recording model proxy in front of the real local engine (tiny model), driven by the official SDKs."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from evsys.model.local.client import LocalModelClient
from evsys.model.proxy import ModelProxy
from evsys.testing import tiny_model

BASH_TOOL = tiny_model.DEMO_BASH_TOOL
GREETING = tiny_model.DEMO_GREETING
GREETING_REPLY = tiny_model.DEMO_GREETING_REPLY
LIST_FILES = tiny_model.DEMO_LIST_FILES

ANTHROPIC_BASH = {
    "name": "bash",
    "description": BASH_TOOL["function"]["description"],
    "input_schema": BASH_TOOL["function"]["parameters"],
}


@pytest.fixture(scope="module")
def tiny_engine_client() -> LocalModelClient:
    """A client over the demo tiny model (built once and cached)."""
    return LocalModelClient(str(tiny_model.build_tiny_model(tiny_model.DEMO_RECIPE)))


@pytest.fixture
async def proxy(tiny_engine_client):
    """A started proxy whose sessions use the tiny model (at most 48 new tokens per call)."""
    async with ModelProxy(tiny_engine_client, max_tokens_cap=48) as started:
        yield started


def openai_client(proxy: ModelProxy, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0)


def anthropic_client(proxy: ModelProxy, key: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=proxy.url, api_key=key, max_retries=0)


async def test_openai_chat_is_answered_and_recorded_with_token_ids(proxy):
    """A plain chat gets the model's reply; the call is recorded with prompt/completion ids and logprobs."""
    session = proxy.open_session()
    reply = await openai_client(proxy, session.key).chat.completions.create(
        model="gpt-whatever", messages=GREETING, temperature=0, logprobs=True
    )
    assert reply.choices[0].message.content == GREETING_REPLY["content"]
    assert reply.model == "gpt-whatever"
    assert len(session.calls) == 1
    call = session.calls[0]
    assert call.dialect == "openai" and call.requested_model == "gpt-whatever" and call.error is None
    assert call.messages == [{"role": "user", "content": GREETING[0]["content"]}]
    done = call.completion
    assert done.prompt_token_ids and done.completion_token_ids
    assert len(done.logprobs) == len(done.completion_token_ids)
    assert [e.logprob for e in reply.choices[0].logprobs.content] == done.logprobs
    assert reply.usage.completion_tokens == len(done.completion_token_ids)


async def test_openai_stream_delivers_tool_call_deltas(proxy):
    """Streaming a tool-calling turn reassembles into the `bash ls` call the tiny model was trained on."""
    session = proxy.open_session()
    stream = await openai_client(proxy, session.key).chat.completions.create(
        model="m",
        messages=LIST_FILES,
        tools=[BASH_TOOL],
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    names, arguments, finish, usage = [], "", None, None
    async for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                if delta.function.name:
                    names.append(delta.function.name)
                arguments += delta.function.arguments or ""
    assert names == ["bash"] and json.loads(arguments) == {"command": "ls"}
    assert finish == "tool_calls"
    recorded = session.calls[0]
    assert recorded.stream and recorded.tools == [BASH_TOOL]
    assert recorded.completion.tool_calls[0].arguments == {"command": "ls"}
    assert usage.completion_tokens == len(recorded.completion.completion_token_ids)


async def test_openai_return_token_ids_matches_the_record(proxy):
    """vLLM-style `return_token_ids` hands the harness the same ids the session recorded."""
    session = proxy.open_session()
    async with httpx.AsyncClient(base_url=proxy.url) as http:
        body = {"model": "m", "messages": GREETING, "temperature": 0, "return_token_ids": True}
        response = await http.post(
            "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {session.key}"}
        )
    assert response.status_code == 200
    data = response.json()
    done = session.calls[0].completion
    assert data["prompt_token_ids"] == done.prompt_token_ids
    assert data["choices"][0]["token_ids"] == done.completion_token_ids


async def test_unknown_and_closed_and_foreign_keys_are_refused(proxy, tmp_path):
    """401 for a made-up key and for a closed session's key; a session's own socket refuses other sessions."""
    with pytest.raises(openai.AuthenticationError) as info:
        await openai_client(proxy, "sk-made-up").chat.completions.create(model="m", messages=GREETING)
    assert info.value.status_code == 401 and info.value.code == "invalid_api_key"

    closed = proxy.open_session()
    proxy.close_session(closed.key)
    with pytest.raises(anthropic.AuthenticationError) as refused:
        await anthropic_client(proxy, closed.key).messages.create(model="m", max_tokens=8, messages=GREETING)
    assert refused.value.body["error"]["type"] == "authentication_error"
    assert closed.calls == []

    mine, other = proxy.open_session(), proxy.open_session()
    sock = await proxy.open_session_socket(mine, tmp_path / "mine.sock")
    transport = httpx.AsyncHTTPTransport(uds=str(sock))
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
        body = {"model": "m", "messages": GREETING, "max_tokens": 4}
        foreign = await http.post(
            "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {other.key}"}
        )
        own = await http.post(
            "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {mine.key}"}
        )
    assert foreign.status_code == 401 and foreign.json()["error"]["code"] == "invalid_api_key"
    assert own.status_code == 200
    assert len(mine.calls) == 1 and other.calls == []


async def test_anthropic_messages_with_tools_round_trip(proxy):
    """Anthropic SDK: a tool_use block comes back; the follow-up tool_result is recorded as a tool message."""
    session = proxy.open_session()
    client = anthropic_client(proxy, session.key)
    first = await client.messages.create(
        model="claude-test",
        max_tokens=48,
        extra_body={"temperature": 0},
        system="You are terse.",
        messages=LIST_FILES,
        tools=[ANTHROPIC_BASH],
    )
    assert first.stop_reason == "tool_use"
    use = next(b for b in first.content if b.type == "tool_use")
    assert use.name == "bash" and use.input == {"command": "ls"}
    follow_up = [
        *LIST_FILES,
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "a.txt\nb.txt"}],
        },
    ]
    await client.messages.create(
        model="claude-test",
        max_tokens=8,
        extra_body={"temperature": 0},
        messages=follow_up,
        tools=[ANTHROPIC_BASH],
    )
    sent = session.calls[1].messages
    assert session.calls[0].messages[0] == {"role": "system", "content": "You are terse."}
    assert sent[0] == LIST_FILES[0]
    assert sent[-1] == {"role": "tool", "tool_call_id": use.id, "content": "a.txt\nb.txt"}
    assert sent[-2]["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"command": "ls"}'}
    steps = session.to_steps()
    agent_steps = [s for s in steps if s.source == "agent"]
    assert len(agent_steps) == 2
    assert agent_steps[0].observation.results[0].content == "a.txt\nb.txt"
    assert agent_steps[0].tool_calls[0].arguments == {"command": "ls"}
    assert agent_steps[0].metrics.completion_token_ids == session.calls[0].completion.completion_token_ids
    assert [s.source for s in steps][:2] == ["system", "user"]


async def test_anthropic_stream_event_sequence(proxy):
    """The SDK's stream helper assembles the greeting; the raw event order is the Anthropic one."""
    session = proxy.open_session()
    client = anthropic_client(proxy, session.key)
    async with client.messages.stream(
        model="c", max_tokens=48, extra_body={"temperature": 0}, messages=GREETING
    ) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_message()
    assert final.content[0].text == GREETING_REPLY["content"]
    assert final.stop_reason == "end_turn"
    raw = [k for k in kinds if k not in ("text",)]
    assert raw[0] == "message_start" and raw[-1] == "message_stop"
    assert raw[1] == "content_block_start" and "content_block_stop" in raw and "message_delta" in raw
    assert final.usage.output_tokens == len(session.calls[0].completion.completion_token_ids)


async def test_bad_requests_name_the_field(proxy):
    """Malformed bodies get 400s in each dialect's shape naming what is wrong; nothing is recorded."""
    session = proxy.open_session()
    async with httpx.AsyncClient(base_url=proxy.url) as http:
        missing = await http.post(
            "/v1/messages", json={"model": "c", "messages": GREETING}, headers={"x-api-key": session.key}
        )
        garbled = await http.post(
            "/v1/chat/completions", content=b"{not json", headers={"Authorization": f"Bearer {session.key}"}
        )
    assert missing.status_code == 400
    assert missing.json()["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in missing.json()["error"]["message"]
    assert garbled.status_code == 400 and "not valid JSON" in garbled.json()["error"]["message"]
    assert session.calls == []


async def test_models_endpoint_lists_the_session_model(proxy):
    """GET /v1/models needs the key and lists the session's model."""
    session = proxy.open_session()
    models = await openai_client(proxy, session.key).models.list()
    assert [m.id for m in models.data] == [session.model_client.model]
    with pytest.raises(openai.AuthenticationError):
        await openai_client(proxy, "nope").models.list()


async def test_context_overflow_is_a_400_and_recorded(proxy):
    """A prompt longer than the tiny model's window is refused with 400 and recorded as a failed call."""
    session = proxy.open_session()
    huge = [{"role": "user", "content": "word " * 3000}]
    with pytest.raises(openai.BadRequestError):
        await openai_client(proxy, session.key).chat.completions.create(model="m", messages=huge)
    assert session.calls[0].completion is None and "context window" in session.calls[0].error
    assert session.to_steps() == []


def test_tcp_listener_disables_nagle():
    """The proxy listens on a real TCP socket with TCP_NODELAY, so small replies are not held ~40 ms."""
    import socket

    from evsys.model.proxy.server import _bind_tcp

    sock = _bind_tcp("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        sock.close()
