"""The proxy's Responses dialect (`POST /v1/responses`) over real HTTP and the official `openai` SDK."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from evsys.model.proxy import ModelProxy
from evsys.model.proxy.responses_dialect import ResponsesRequest
from evsys.testing import tiny_model

GREETING = tiny_model.DEMO_GREETING[0]["content"]
GREETING_REPLY = tiny_model.DEMO_GREETING_REPLY["content"]
LIST_FILES = tiny_model.DEMO_LIST_FILES[0]["content"]
BASH = {"type": "function", **tiny_model.DEMO_BASH_TOOL["function"]}


def client(proxy: ModelProxy, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0)


async def post(proxy: ModelProxy, key: str, body: object) -> httpx.Response:
    async with httpx.AsyncClient(base_url=proxy.url, timeout=60) as http:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        return await http.post("/v1/responses", content=content, headers=headers)


async def test_sdk_text_response_is_parsed_and_recorded_with_token_ids(proxy):
    """responses.create returns the model's reply as output_text; the call is recorded with token ids."""
    session = proxy.open_session()
    reply = await client(proxy, session.key).responses.create(
        model="gpt-5-codex", input=GREETING, temperature=0
    )
    assert reply.status == "completed" and reply.model == "gpt-5-codex"
    assert reply.output_text == GREETING_REPLY
    [call] = session.calls
    assert call.dialect == "responses" and call.requested_model == "gpt-5-codex" and call.error is None
    assert call.messages == [{"role": "user", "content": GREETING}]
    completion = call.completion
    assert completion.prompt_token_ids and completion.completion_token_ids
    assert reply.usage.input_tokens == len(completion.prompt_token_ids)
    assert reply.usage.output_tokens == len(completion.completion_token_ids)
    assert reply.usage.total_tokens == reply.usage.input_tokens + reply.usage.output_tokens


async def test_sdk_stream_has_the_event_sequence_and_the_text(proxy):
    """A streamed text reply arrives as created ... output_text.delta ... completed, in sequence order."""
    session = proxy.open_session()
    stream = await client(proxy, session.key).responses.create(
        model="m", input=[{"role": "user", "content": GREETING}], temperature=0, stream=True
    )
    events = [event async for event in stream]
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == GREETING_REPLY
    final = events[-1].response
    assert final.output_text == GREETING_REPLY
    assert final.usage.output_tokens == len(session.calls[0].completion.completion_token_ids)
    assert session.calls[0].stream is True


async def test_tool_call_then_tool_output_round_trip(proxy):
    """The demo model calls bash; its output sent back as function_call_output reaches the chat as a tool
    message answering that call, and the ATIF steps attach it as the observation of the calling step."""
    session = proxy.open_session()
    api = client(proxy, session.key)
    first = await api.responses.create(model="m", input=LIST_FILES, tools=[BASH], temperature=0)
    [call_item] = [item for item in first.output if item.type == "function_call"]
    assert call_item.name == "bash" and json.loads(call_item.arguments) == {"command": "ls"}
    assert session.calls[0].tools == [tiny_model.DEMO_BASH_TOOL]

    history = [
        {"role": "user", "content": LIST_FILES},
        {
            "type": "function_call",
            "call_id": call_item.call_id,
            "name": "bash",
            "arguments": call_item.arguments,
        },
        {"type": "function_call_output", "call_id": call_item.call_id, "output": "a.txt\nb.txt"},
    ]
    await api.responses.create(model="m", input=history, tools=[BASH], temperature=0)
    assert session.calls[1].messages == [
        {"role": "user", "content": LIST_FILES},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": call_item.call_id,
                    "type": "function",
                    "function": {"name": "bash", "arguments": call_item.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_item.call_id, "content": "a.txt\nb.txt"},
    ]
    steps = session.to_steps()
    assert [s.source for s in steps] == ["user", "agent", "agent"]
    assert steps[1].tool_calls[0].function_name == "bash"
    assert steps[1].observation.results[0].content == "a.txt\nb.txt"


async def test_streamed_tool_call_has_argument_deltas(proxy):
    """A streamed tool call: output_item.added, argument deltas adding up to arguments.done."""
    session = proxy.open_session()
    stream = await client(proxy, session.key).responses.create(
        model="m", input=LIST_FILES, tools=[BASH], temperature=0, stream=True
    )
    events = [event async for event in stream]
    added = [e.item for e in events if e.type == "response.output_item.added"]
    assert "function_call" in [item.type for item in added]
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert deltas == done.arguments and json.loads(done.arguments) == {"command": "ls"}
    assert events[-1].type == "response.completed"
    [final_call] = [i for i in events[-1].response.output if i.type == "function_call"]
    assert final_call.call_id == session.calls[0].completion.tool_calls[0].tool_call_id


async def test_instructions_developer_and_unsupported_tools(proxy):
    """instructions and developer messages become system messages; web_search and custom tools are dropped
    and noted on the call; namespace tools are offered flattened; unknown fields are tolerated."""
    session = proxy.open_session()
    body = {
        "model": "m",
        "instructions": "Be brief.",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Rules."}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": GREETING}]},
        ],
        "tools": [
            {"type": "web_search", "external_web_access": False},
            {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
            {"type": "namespace", "name": "team", "tools": [{"type": "function", "name": "spawn"}]},
        ],
        "reasoning": {"summary": "auto"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "client_metadata": {"anything": "goes"},
        "stream": False,
    }
    response = await post(proxy, session.key, body)
    assert response.status_code == 200, response.text
    call = session.calls[0]
    assert call.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": GREETING},
    ]
    assert [t["function"]["name"] for t in call.tools] == ["team__spawn"]
    notes = " ".join(call.notes)
    assert "web_search" in notes and "custom" in notes and "reasoning" in notes


def test_namespaced_calls_map_back_to_their_namespace():
    """A call of a flattened namespace tool is reported with its own name and namespace, and a function_call
    item carrying a namespace is given to the model under the flattened name."""
    request = ResponsesRequest.model_validate(
        {
            "input": [
                {"role": "user", "content": "go"},
                {
                    "type": "function_call",
                    "call_id": "c1",
                    "name": "spawn",
                    "namespace": "team",
                    "arguments": "{}",
                },
            ],
            "tools": [
                {"type": "namespace", "name": "team", "tools": [{"type": "function", "name": "spawn"}]}
            ],
        }
    )
    messages, _ = request.chat()
    assert messages[1]["tool_calls"][0]["function"]["name"] == "team__spawn"
    assert request.public_name("team__spawn") == ("spawn", "team")
    assert request.public_name("bash") == ("bash", None)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"model": "m"}, "input"),
        ({"input": [{"role": "user", "content": "x"}, {"type": "function_call_output"}]}, "input[1].call_id"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        (
            {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]},
            "input[0].arguments",
        ),
        ({"input": "hi", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "hi", "tools": [{"type": "function"}]}, "tools[0].name"),
        (b"{not json", "not valid JSON"),
    ],
)
async def test_bad_bodies_are_400_naming_the_field(proxy, body, named):
    """A malformed request gets 400 in the OpenAI error shape naming the field; nothing is recorded."""
    session = proxy.open_session()
    response = await post(proxy, session.key, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and named in error["message"]
    assert session.calls == []


async def test_wrong_key_is_401_for_http_and_sdk(proxy):
    """An unknown key is refused with 401 / invalid_api_key, and the SDK raises AuthenticationError."""
    proxy.open_session()
    response = await post(proxy, "evsys-not-a-session", {"input": "hi"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        await client(proxy, "evsys-not-a-session").responses.create(model="m", input="hi")


async def test_own_output_limit_is_incomplete_but_the_proxy_cap_is_not(proxy):
    """max_output_tokens cutting the reply gives status incomplete (stream: response.incomplete); the proxy's
    own cap (48 here) cutting it is reported as completed."""
    session = proxy.open_session()
    api = client(proxy, session.key)
    cut = await api.responses.create(model="m", input=GREETING, temperature=0, max_output_tokens=2)
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    stream = await api.responses.create(model="m", input=GREETING, max_output_tokens=2, stream=True)
    assert [e async for e in stream][-1].type == "response.incomplete"
    capped = await api.responses.create(model="m", input="x " * 20, temperature=1.0, max_output_tokens=500)
    assert session.calls[-1].params.max_tokens == 48
    assert capped.status == "completed"
