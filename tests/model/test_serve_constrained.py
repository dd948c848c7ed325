"""`evsys model serve`'s constrained decoding over the tiny model: JSON `response_format` and forced tool
calls (`tool_choice` "required" or a named function), over real HTTP."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from evsys.testing.tiny_model import DEMO_BASH_TOOL as BASH_TOOL
from evsys.testing.tiny_model import DEMO_GREETING as GREETING
from evsys.testing.tiny_model import DEMO_GREETING_REPLY as GREETING_REPLY
from evsys.testing.tiny_model import DEMO_LIST_FILES as LIST_FILES

WRITE_TOOL = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write text to a file.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "maxLength": 16},
                "append": {"type": "boolean"},
            },
            "required": ["path", "append"],
            "additionalProperties": False,
        },
    },
}
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "maxLength": 12},
        "safe": {"type": "boolean"},
        "kind": {"enum": ["shell", "text"]},
    },
    "required": ["command", "safe", "kind"],
    "additionalProperties": False,
}


def assert_valid(value: Any, schema: dict[str, Any]) -> None:
    """`value` is valid against `schema` (jsonschema when installed, else the keys and types checked)."""
    try:
        import jsonschema
    except ImportError:
        assert isinstance(value, dict) and set(schema["required"]) <= set(value)
        assert set(value) <= set(schema["properties"])
        return
    jsonschema.validate(value, schema)


async def chat(url: str, **body: Any) -> dict[str, Any]:
    """POST a chat completion for model `tiny` and return the JSON answer (any status)."""
    async with httpx.AsyncClient(timeout=300) as http:
        response = await http.post(f"{url}/chat/completions", json={"model": "tiny", **body})
    return {"status": response.status_code, **response.json()}


async def test_json_object_response_is_a_json_object(tiny_server):
    """Sampled with the same seed, the plain answer is a tool call, the json_object one a parseable object."""
    body = {"messages": LIST_FILES, "tools": [BASH_TOOL], "seed": 2, "max_tokens": 120}
    plain = await chat(tiny_server, **body)
    constrained = await chat(tiny_server, **body, response_format={"type": "json_object"})
    assert plain["choices"][0]["finish_reason"] == "tool_calls"  # what the model does on its own
    choice = constrained["choices"][0]
    assert choice["finish_reason"] == "stop" and not choice["message"].get("tool_calls")
    assert isinstance(json.loads(choice["message"]["content"]), dict)


async def test_json_schema_response_is_valid_and_logprobs_stay_raw(tiny_client, tiny_server):
    """Greedy, the model would greet; with a json_schema format it answers JSON valid against the schema, and
    each recorded logprob is the model's raw one (teacher forcing reproduces it)."""
    format_ = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA}}
    body = {"messages": GREETING, "temperature": 0, "max_tokens": 200, "logprobs": True}
    answer = await chat(tiny_server, **body, response_format=format_, return_token_ids=True)
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert_valid(json.loads(choice["message"]["content"]), ANSWER_SCHEMA)
    engine = await tiny_client.engine()
    raw = engine.score(answer["prompt_token_ids"], choice["token_ids"])
    recorded = [entry["logprob"] for entry in choice["logprobs"]["content"]]
    assert recorded == pytest.approx(raw, abs=1e-4)
    plain = await chat(tiny_server, **body)
    assert plain["choices"][0]["message"]["content"] == GREETING_REPLY["content"]


async def test_json_content_is_never_read_as_a_tool_call(tiny_server):
    """JSON content that spells tool-call markup stays content (plain and streamed), not a tool call."""
    value = "<tool_call>ls</tool_call>"
    format_ = {"type": "json_schema", "json_schema": {"schema": {"enum": [value]}}}
    body = {"messages": LIST_FILES, "tools": [BASH_TOOL], "temperature": 0, "max_tokens": 60}
    choice = (await chat(tiny_server, **body, response_format=format_))["choices"][0]
    assert choice["finish_reason"] == "stop" and not choice["message"].get("tool_calls")
    assert json.loads(choice["message"]["content"]) == value
    assert await _streamed_tool_calls(tiny_server, {**body, "response_format": format_}) == []


async def test_tool_choice_required_forces_a_valid_tool_call(tiny_server):
    """The model greets when asked to; with tool_choice 'required' it must call a tool, with arguments valid
    against the tool's schema; streamed, the call arrives the same way."""
    body = {"messages": GREETING, "tools": [WRITE_TOOL], "temperature": 0, "max_tokens": 120}
    hidden = await chat(tiny_server, **body, tool_choice="none")
    assert hidden["choices"][0]["message"]["content"] == GREETING_REPLY["content"]
    forced = await chat(tiny_server, **body, tool_choice="required")
    choice = forced["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "write_file"
    assert_valid(json.loads(call["function"]["arguments"]), WRITE_TOOL["function"]["parameters"])
    streamed = await _streamed_tool_calls(tiny_server, {**body, "tool_choice": "required"})
    assert streamed == [call["function"]]


async def test_named_tool_choice_forces_that_tool(tiny_server):
    """Offered bash and write_file, with the prompt the model answers with `bash ls`: naming write_file makes
    it call write_file; naming bash keeps its own call."""
    body = {"messages": LIST_FILES, "tools": [BASH_TOOL, WRITE_TOOL], "temperature": 0, "max_tokens": 120}
    for name in ("write_file", "bash"):
        answer = await chat(tiny_server, **body, tool_choice={"type": "function", "function": {"name": name}})
        choice = answer["choices"][0]
        assert choice["finish_reason"] == "tool_calls", answer
        (call,) = choice["message"]["tool_calls"]
        assert call["function"]["name"] == name
        tool = WRITE_TOOL if name == "write_file" else BASH_TOOL
        assert_valid(json.loads(call["function"]["arguments"]), tool["function"]["parameters"])


async def test_constrained_and_plain_requests_share_a_batch(tiny_server):
    """A constrained request in the same batch leaves an unconstrained one exactly as it is alone."""
    format_ = {"type": "json_schema", "json_schema": {"schema": ANSWER_SCHEMA}}
    body = {"messages": GREETING, "temperature": 0, "max_tokens": 120}
    together = await asyncio.gather(
        *(chat(tiny_server, **body, response_format=format_) for _ in range(2)), chat(tiny_server, **body)
    )
    assert together[-1]["choices"][0]["message"]["content"] == GREETING_REPLY["content"]
    for answer in together[:-1]:
        assert_valid(json.loads(answer["choices"][0]["message"]["content"]), ANSWER_SCHEMA)


REFUSED = [
    ({"tool_choice": "required"}, "needs tools"),
    ({"tools": [BASH_TOOL], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "'nope'"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "json_schema.schema"),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "frob"}}}},
        "cannot be enforced",
    ),
    (
        {"tools": [BASH_TOOL], "tool_choice": "required", "response_format": {"type": "json_object"}},
        "JSON response_format",
    ),
]


@pytest.mark.parametrize(("extra", "why"), REFUSED)
async def test_constraints_that_cannot_be_honoured_are_a_400(tiny_server, extra, why):
    """A forced tool call without (that) tool, a json_schema without a schema or with one that cannot be
    enforced, or both constraints at once."""
    answer = await chat(tiny_server, messages=GREETING, **extra)
    assert answer["status"] == 400 and why in answer["error"]["message"], answer


async def _streamed_tool_calls(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool calls of a streamed chat completion (their `function` parts)."""
    calls = []
    async with (
        httpx.AsyncClient(timeout=300) as http,
        http.stream("POST", f"{url}/chat/completions", json={"model": "tiny", **body, "stream": True}) as r,
    ):
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line.removeprefix("data: "))["choices"]:
                    calls += [c["function"] for c in choice["delta"].get("tool_calls") or []]
    return calls
