"""What one session's request bodies may cost the proxy (issue 38): an unknown key is refused before its body
is read, a session receives a few bodies at once within a byte budget (429 beyond), a body of too many JSON
values gets 413 before it is parsed. Each case runs beside its control (the same requests with a known key,
or with the budget lifted) on an in-process proxy whose model answers every call with a fixed reply."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from proxy_process import REPLY, FixedReplyClient

from evsys.model.proxy import ModelProxy
from evsys.model.proxy.intake import UNBOUNDED, BodyBudget
from load_attacks import HeldPost, post_raw, stream_body

MIB = 1 << 20
CHAT = "/v1/chat/completions"


def chat_body(content: str = "hi", messages: int = 1) -> bytes:
    """An OpenAI chat request of `messages` user messages saying `content`."""
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": content}] * messages}).encode()


@pytest.fixture
async def proxy_factory():
    """`await proxy_factory(**kwargs)`: a started in-process proxy (TCP) with two sessions:
    (proxy, (host, port), a, b); every proxy it started is stopped when the test ends."""
    made: list[ModelProxy] = []

    async def start(**kwargs):
        proxy = ModelProxy(FixedReplyClient(), **kwargs)
        made.append(proxy)
        await proxy.start()
        host, port = proxy.url.removeprefix("http://").rsplit(":", 1)
        return proxy, (host, int(port)), proxy.open_session(), proxy.open_session()

    yield start
    for proxy in made:
        await proxy.stop()


def auth(session) -> dict[str, str]:
    return {"Authorization": f"Bearer {session.key}"}


async def post(address, body: bytes, session, path: str = CHAT):
    return await asyncio.to_thread(post_raw, address, path, body, auth(session))


async def test_an_unknown_key_is_refused_before_its_body_is_read(proxy_factory):
    _proxy, address, a, _ = await proxy_factory(max_body_bytes=16 * MIB)
    flood = {"path": CHAT, "total": 256 * MIB, "pid": os.getpid()}
    # control: with the session's key, the body is read until it crosses the limit
    known = await asyncio.to_thread(stream_body, address, headers=auth(a), **flood)
    assert known.status == 413 and known.sent >= 16 * MIB
    unknown = await asyncio.to_thread(stream_body, address, headers={"x-api-key": "evsys-nope"}, **flood)
    assert unknown.status == 401 and unknown.sent < 16 * MIB, (unknown.sent, unknown.response[:300])
    assert b"invalid API key" in unknown.response


@pytest.mark.parametrize("bounded", [True, False])
async def test_a_session_receives_four_bodies_at_once_and_the_fifth_waits_its_turn(proxy_factory, bounded):
    budget = BodyBudget() if bounded else UNBOUNDED
    _, address, a, b = await proxy_factory(body_budget=budget)
    body = chat_body()
    held = [await asyncio.to_thread(HeldPost, address, CHAT, body, auth(a), 10) for _ in range(4)]
    assert (await post(address, body, b)).status == 200  # another session is answered meanwhile
    fifth = await post(address, body, a)
    if not bounded:  # the control: without the budget, a fifth body is read and answered too
        assert fifth.status == 200
    else:
        assert fifth.status == 429 and "retry-after: 1" in fifth.text.lower()
        assert "too many request bodies at once" in fifth.text
    finished = await asyncio.gather(*(asyncio.to_thread(h.finish) for h in held))
    assert [r.status for r in finished] == [200] * 4 and REPLY in finished[0].text
    assert (await post(address, body, a)).status == 200  # the bodies answered, the session sends again
    assert len(a.calls) == 5 + (not bounded)


@pytest.mark.parametrize("bounded", [True, False])
async def test_a_session_s_bodies_in_flight_have_a_byte_budget(proxy_factory, bounded):
    budget = BodyBudget(max_bytes=MIB) if bounded else UNBOUNDED
    _, address, a, b = await proxy_factory(body_budget=budget)
    big = chat_body("x" * (600 * 1024))
    first = await asyncio.to_thread(HeldPost, address, CHAT, big, auth(a), 500 * 1024)
    assert (await post(address, big, b)).status == 200  # another session's budget is its own
    second = await post(address, big, a)
    if bounded:
        assert second.status == 429 and "over this session's budget of 1,048,576 bytes" in second.text
    else:  # the control: without the budget the second body is read while the first is held
        assert second.status == 200
    assert (await asyncio.to_thread(first.finish)).status == 200
    assert (await post(address, big, a)).status == 200  # the first answered: its bytes are free again


async def test_a_body_of_too_many_json_values_gets_413_before_it_is_parsed(proxy_factory):
    _proxy, address, a, _ = await proxy_factory(body_budget=BodyBudget(max_json_values=1000))
    # control: as many commas and brackets inside a string are text, not values
    assert (await post(address, chat_body(",{[" * 2000), a)).status == 200
    many = await post(address, chat_body(messages=400), a)
    assert many.status == 413 and "JSON of about 1,203 values, over the limit of 1,000" in many.text
    anthropic = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}] * 400}
    refused = await post(address, json.dumps(anthropic).encode(), a, "/v1/messages")
    assert refused.status == 413 and '"type":"request_too_large"' in refused.text.replace(" ", "")
    assert len(a.calls) == 1  # neither refused body reached the model
    # /mcp parses its bodies itself: the same count refuses them first (control: a small one reaches it)
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"pad": [{}] * 1000}}
    assert "serves no environment tools" in (await post(address, b'{"jsonrpc": "2.0"}', a, "/mcp")).text
    mcp = await post(address, json.dumps(rpc).encode(), a, "/mcp")
    assert mcp.status == 413 and '"jsonrpc":"2.0"' in mcp.text.replace(" ", "") and "2,006 values" in mcp.text
