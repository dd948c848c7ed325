"""The proxy's Google Gemini API dialect (`generateContent`, `streamGenerateContent?alt=sse`, `countTokens`)
over the trained tiny model, as Gemini CLI's SDK calls it: function declarations and calls, function
responses matched to their calls, token ids recorded."""

from __future__ import annotations

import json

import httpx
import pytest

from evsys.model.local.client import LocalModelClient
from evsys.model.proxy import ModelProxy
from evsys.model.proxy.google_dialect import GoogleRequest
from evsys.testing import tiny_model

BASH = tiny_model.DEMO_BASH_TOOL["function"]
LIST_FILES = [{"role": "user", "parts": [{"text": tiny_model.DEMO_LIST_FILES[0]["content"]}]}]
GREETING = [{"role": "user", "parts": [{"text": tiny_model.DEMO_GREETING[0]["content"]}]}]
GREEDY = {"temperature": 0, "maxOutputTokens": 48}


@pytest.fixture(scope="module")
def tiny_engine_client() -> LocalModelClient:
    """A client over the demo tiny model (built once and cached)."""
    return LocalModelClient(str(tiny_model.build_tiny_model(tiny_model.DEMO_RECIPE)))


@pytest.fixture
async def proxy(tiny_engine_client):
    """A started proxy whose sessions use the tiny model."""
    async with ModelProxy(tiny_engine_client, max_tokens_cap=48) as started:
        yield started


def google_client(proxy: ModelProxy, key: str) -> httpx.AsyncClient:
    """An HTTP client sending the key the way the Google GenAI SDKs do."""
    return httpx.AsyncClient(base_url=f"{proxy.url}/v1beta", headers={"x-goog-api-key": key}, timeout=120)


async def test_function_call_round_trip_is_recorded_with_token_ids(proxy):
    """A declared function (OpenAPI-style upper-case types) is called as trained; the follow-up's
    functionResponse (no id, as older clients send) is recorded as the tool message answering that call."""
    session = proxy.open_session()
    declaration = {**BASH, "parameters": {"type": "OBJECT", "properties": {"command": {"type": "STRING"}}}}
    body = {
        "contents": LIST_FILES,
        "systemInstruction": {"parts": [{"text": "You are terse."}]},
        "tools": [{"functionDeclarations": [declaration]}, {"googleSearch": {}}],
        "generationConfig": GREEDY,
    }
    async with google_client(proxy, session.key) as http:
        reply = await http.post("/models/gemini-test:generateContent", json=body)
        assert reply.status_code == 200, reply.text
        candidate = reply.json()["candidates"][0]
        [call] = [p["functionCall"] for p in candidate["content"]["parts"] if "functionCall" in p]
        assert call["name"] == "bash" and call["args"] == {"command": "ls"}
        model_turn = {"role": "model", "parts": [{"functionCall": {"name": "bash", "args": call["args"]}}]}
        answer = {"functionResponse": {"name": "bash", "response": {"output": "a.txt\nb.txt"}}}
        follow_up = {**body, "contents": [*LIST_FILES, model_turn, {"role": "user", "parts": [answer]}]}
        assert (await http.post("/models/gemini-test:generateContent", json=follow_up)).status_code == 200
    first, second = session.calls
    assert first.dialect == "google" and first.requested_model == "gemini-test" and not first.stream
    assert first.messages[0] == {"role": "system", "content": "You are terse."}
    assert first.tools[0]["function"]["parameters"]["properties"]["command"] == {"type": "string"}
    assert first.notes == ["tool not served: ['googleSearch']"]
    assert first.completion.prompt_token_ids and first.completion.completion_token_ids
    usage = reply.json()["usageMetadata"]
    assert usage["candidatesTokenCount"] == len(first.completion.completion_token_ids)
    [sent_call] = second.messages[-2]["tool_calls"]
    assert second.messages[-1] == {"role": "tool", "tool_call_id": sent_call["id"], "content": "a.txt\nb.txt"}


async def test_stream_generate_content_sse_assembles_the_reply(proxy):
    """`alt=sse`: `data:` events whose texts join into the greeting; the last carries finish and usage."""
    session = proxy.open_session()
    async with google_client(proxy, session.key) as http:
        reply = await http.post(
            "/models/g:streamGenerateContent?alt=sse", json={"contents": GREETING, "generationConfig": GREEDY}
        )
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: ")]
    assert len(events) > 1
    text = "".join(p.get("text", "") for e in events for p in e["candidates"][0]["content"]["parts"])
    assert text == tiny_model.DEMO_GREETING_REPLY["content"]
    assert events[-1]["candidates"][0]["finishReason"] == "STOP" and "usageMetadata" in events[-1]
    assert session.calls[0].stream and session.calls[0].completion.completion_token_ids


async def test_keys_methods_and_bad_bodies_are_answered_in_google_shape(proxy):
    """An unknown key is 401, an unknown method 404, a body without contents 400 naming the field, all as
    Google error objects; the key also works as `?key=`; countTokens answers without calling the model."""
    session = proxy.open_session()
    async with google_client(proxy, "evsys-nope") as http:
        refused = await http.post("/models/g:generateContent", json={"contents": GREETING})
    assert refused.status_code == 401 and refused.json()["error"]["status"] == "UNAUTHENTICATED"
    async with httpx.AsyncClient(base_url=f"{proxy.url}/v1beta") as http:
        key = {"key": session.key}
        unknown = await http.post("/models/g:embedContent", params=key, json={"contents": GREETING})
        bad = await http.post("/models/g:generateContent", params=key, json={"contents": []})
        count = await http.post("/models/g:countTokens", params=key, json={"contents": GREETING})
    assert unknown.status_code == 404 and "embedContent" in unknown.json()["error"]["message"]
    assert bad.status_code == 400 and "contents" in bad.json()["error"]["message"]
    assert count.status_code == 200 and count.json()["totalTokens"] > 0
    assert session.calls == []


def test_thoughts_and_other_parts_never_reach_the_model_as_text():
    """Thought parts are dropped, inline data becomes a placeholder, `parametersJsonSchema` is kept as is."""
    request = GoogleRequest.model_validate(
        {
            "contents": [
                {"role": "user", "parts": [{"text": "Look:"}, {"inlineData": {"mimeType": "image/png"}}]},
                {"role": "model", "parts": [{"text": "secret plan", "thought": True}, {"text": "Seen."}]},
            ],
            "tools": [{"functionDeclarations": [{"name": "f", "parametersJsonSchema": {"type": "object"}}]}],
        }
    )
    messages, tools = request.chat()
    assert messages == [
        {"role": "user", "content": "Look:[inlineData omitted]"},
        {"role": "assistant", "content": "Seen."},
    ]
    assert tools[0]["function"]["parameters"] == {"type": "object"}
