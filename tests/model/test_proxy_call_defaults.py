"""The job's generation flags at the harness proxy: `--temperature` and `--max-tokens` fill what a request
leaves out (never what it passes), in every dialect; `--max-turns` refuses the call past the limit."""

from __future__ import annotations

import httpx
import pytest
from proxy_process import FixedReplyClient

from evsys.model.proxy import ModelProxy
from evsys.model.proxy.wire import CallDefaults

HELLO = [{"role": "user", "content": "hi"}]
# per dialect: the path, a body without sampling fields, and the fields that pass the request's own
PLAIN = {
    "openai": (
        "/v1/chat/completions",
        {"model": "m", "messages": HELLO},
        {"temperature": 0.3, "max_tokens": 9},
    ),
    "responses": (
        "/v1/responses",
        {"model": "m", "input": "hi"},
        {"temperature": 0.3, "max_output_tokens": 9},
    ),
    "google": (
        "/v1beta/models/m:generateContent",
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        {"generationConfig": {"temperature": 0.3, "maxOutputTokens": 9}},
    ),
}


async def _post(proxy: ModelProxy, key: str, path: str, body: dict) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", "x-goog-api-key": key}
    async with httpx.AsyncClient(base_url=proxy.url, headers=headers) as http:
        return await http.post(path, json=body)


@pytest.mark.parametrize("dialect", sorted(PLAIN))
async def test_defaults_fill_only_what_a_request_leaves_out(dialect):
    path, body, own = PLAIN[dialect]
    defaults = CallDefaults(temperature=0.0, max_tokens=77)
    async with ModelProxy(FixedReplyClient(), defaults=defaults) as proxy:
        session = proxy.open_session()
        assert (await _post(proxy, session.key, path, body)).status_code == 200
        assert (await _post(proxy, session.key, path, {**body, **own})).status_code == 200
    [left_out, passed] = [(c.params.temperature, c.params.max_tokens) for c in session.calls]
    assert left_out == (0.0, 77)
    assert passed == (0.3, 9)


async def test_defaults_stay_under_the_proxys_max_tokens_cap():
    async with ModelProxy(
        FixedReplyClient(), max_tokens_cap=48, defaults=CallDefaults(max_tokens=500)
    ) as proxy:
        session = proxy.open_session()
        path, body, _ = PLAIN["openai"]
        assert (await _post(proxy, session.key, path, body)).status_code == 200
    assert session.calls[0].params.max_tokens == 48


async def test_an_anthropic_request_without_temperature_gets_the_default():
    async with ModelProxy(FixedReplyClient(), defaults=CallDefaults(temperature=0.0)) as proxy:
        session = proxy.open_session()
        body = {"model": "m", "max_tokens": 16, "messages": HELLO}
        assert (await _post(proxy, session.key, "/v1/messages", body)).status_code == 200
    assert (session.calls[0].params.temperature, session.calls[0].params.max_tokens) == (0.0, 16)


async def test_max_calls_refuses_the_call_past_the_limit():
    async with ModelProxy(FixedReplyClient(), defaults=CallDefaults(max_calls=2)) as proxy:
        session = proxy.open_session()
        path, body, _ = PLAIN["openai"]
        codes = [(await _post(proxy, session.key, path, body)).status_code for _ in range(3)]
        refused = await _post(proxy, session.key, path, body)
    assert codes == [200, 200, 400]
    assert "--max-turns 2" in refused.text
    assert len(session.calls) == 2 and proxy.calls_refused == 2
