"""Model names with `/` and `:` (`vllm:Qwen/Qwen3-8B`, `local:/path/to/model`) through every proxy
dialect, sent the way each real client sends them: the `openai` SDK (chat completions and Responses), the
`anthropic` SDK, and for Gemini the URL `@google/genai` (Gemini CLI) builds, `/v1beta/models/<model>:<method>`
with the model as it is (google-genai is not installed here; the path is what its `tModel` and request path
produce, checked by hand with @google/genai 1.52.0 under node: 404 before, answered now), and percent-encoded
as some clients send it."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest
from proxy_process import REPLY, FixedReplyClient

from evsys.model.proxy import ModelProxy

NAMES = ["vllm:Qwen/Qwen3-8B", "local:/path/to/model"]
HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def proxy():
    """A started in-process proxy whose model answers every call with `REPLY`."""
    async with ModelProxy(FixedReplyClient()) as started:
        yield started


@pytest.mark.parametrize("name", NAMES)
async def test_openai_chat_and_responses_sdk(proxy, name):
    import openai

    session = proxy.open_session()
    async with openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key=session.key, max_retries=0) as client:
        chat = await client.chat.completions.create(model=name, messages=HELLO)
        response = await client.responses.create(model=name, input="hi")
    assert chat.choices[0].message.content == REPLY and response.output_text == REPLY
    assert [(c.dialect, c.requested_model) for c in session.calls] == [("openai", name), ("responses", name)]


@pytest.mark.parametrize("name", NAMES)
async def test_anthropic_sdk(proxy, name):
    import anthropic

    session = proxy.open_session()
    async with anthropic.AsyncAnthropic(base_url=proxy.url, api_key=session.key, max_retries=0) as client:
        message = await client.messages.create(model=name, max_tokens=16, messages=HELLO)
        async with client.messages.stream(model=name, max_tokens=16, messages=HELLO) as stream:
            streamed = await stream.get_final_message()
    assert message.content[0].text == REPLY and streamed.content[0].text == REPLY
    assert [c.requested_model for c in session.calls] == [name, name]


@pytest.mark.parametrize("encode", [False, True], ids=["as-is", "percent-encoded"])
@pytest.mark.parametrize("name", NAMES)
async def test_google_generate_stream_and_count(proxy, name, encode):
    session = proxy.open_session()
    model = quote(name, safe="") if encode else name
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    headers = {"x-goog-api-key": session.key}
    async with httpx.AsyncClient(base_url=f"{proxy.url}/v1beta/models", headers=headers) as http:
        whole = await http.post(f"/{model}:generateContent", json=body)
        streamed = await http.post(f"/{model}:streamGenerateContent", params={"alt": "sse"}, json=body)
        counted = await http.post(f"/{model}:countTokens", json=body)
    assert whole.status_code == 200, whole.text
    assert whole.json()["candidates"][0]["content"]["parts"] == [{"text": REPLY}]
    assert whole.json()["modelVersion"] == name
    assert streamed.status_code == 200 and REPLY in streamed.text
    assert counted.status_code == 200 and counted.json()["totalTokens"] > 0
    assert [(c.requested_model, c.stream) for c in session.calls] == [(name, False), (name, True)]
