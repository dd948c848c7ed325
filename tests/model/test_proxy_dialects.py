"""Request translation and session bookkeeping of the model proxy (pure functions and in-process objects)."""

from __future__ import annotations

import json

import pytest

from evsys.model.base import Completion, SamplingParams
from evsys.model.local.client import LocalModelClient
from evsys.model.proxy import ModelProxy, ProxyCall, ProxySession, calls_to_steps
from evsys.model.proxy.anthropic_dialect import AnthropicRequest, stream_events
from evsys.model.proxy.openai_dialect import OpenAIChatRequest, stream_chunks
from evsys.records import ToolCall, Usage
from evsys.testing.tiny_model import DEMO_RECIPE, build_tiny_model


def test_anthropic_blocks_become_openai_messages():
    """System blocks, tool_use and tool_result (list content, is_error) map onto OpenAI messages in order."""
    request = AnthropicRequest.model_validate(
        {
            "model": "c",
            "max_tokens": 5,
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "read", "description": "Read a file", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": "Read a.txt"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hmm", "signature": "x"},
                        {"type": "text", "text": "Reading."},
                        {"type": "tool_use", "id": "tu1", "name": "read", "input": {"path": "a.txt"}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "tu1",
                            "is_error": True,
                            "content": [{"type": "text", "text": "no such file"}],
                        },
                        {"type": "text", "text": "Try b.txt"},
                    ],
                },
            ],
        }
    )
    messages, tools = request.chat()
    assert messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Read a.txt"},
        {
            "role": "assistant",
            "content": "Reading.",
            "tool_calls": [
                {
                    "id": "tu1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path": "a.txt"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "tu1", "content": "[error] no such file"},
        {"role": "user", "content": "Try b.txt"},
    ]
    assert tools == [
        {
            "type": "function",
            "function": {"name": "read", "description": "Read a file", "parameters": {"type": "object"}},
        }
    ]
    assert request.sampling(max_tokens_cap=3).max_tokens == 3


def test_openai_content_parts_and_developer_role_are_normalised():
    """List content is flattened to text; `developer` becomes `system`; the max-token cap applies."""
    request = OpenAIChatRequest.model_validate(
        {
            "model": "m",
            "max_completion_tokens": 100,
            "stop": "END",
            "messages": [
                {"role": "developer", "content": [{"type": "text", "text": "Rules."}]},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}],
                },
            ],
        }
    )
    messages, tools = request.chat()
    assert messages == [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": "a[image_url omitted]"},
    ]
    assert tools is None
    params = request.sampling(max_tokens_cap=64)
    assert params.max_tokens == 64 and params.stop == ["END"]


def completion_with_call() -> Completion:
    raw = '{"command": "ls -la /tmp"}'
    call = ToolCall(tool_call_id="call_1", function_name="bash", arguments=json.loads(raw), raw_arguments=raw)
    return Completion(
        text="Listing the directory now.",
        tool_calls=[call],
        finish_reason="tool_calls",
        prompt_token_ids=[1, 2],
        completion_token_ids=[3, 4, 5],
        logprobs=[-0.1, -0.2, -0.3],
        usage=Usage(prompt_tokens=2, completion_tokens=3),
    )


def test_openai_stream_reassembles_to_the_completion():
    """Concatenated deltas give back the text and the exact tool-call arguments."""
    request = OpenAIChatRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    chunks = [
        json.loads(line[6:])
        for line in stream_chunks(request, completion_with_call())
        if line != "data: [DONE]\n\n"
    ]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("content") or "" for d in deltas) == "Listing the directory now."
    args = "".join(t["function"].get("arguments", "") for d in deltas for t in d.get("tool_calls", []))
    assert args == '{"command": "ls -la /tmp"}'
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_anthropic_stream_reassembles_to_the_completion():
    """Text deltas and input_json deltas rebuild the blocks; stop_reason is tool_use."""
    request = AnthropicRequest.model_validate(
        {"model": "c", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}]}
    )
    events = []
    for raw in stream_events(request, completion_with_call()):
        kind, data = raw.strip().split("\n")
        events.append((kind.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    text = "".join(d["delta"]["text"] for k, d in events if k == "content_block_delta" and d["index"] == 0)
    partial = "".join(
        d["delta"]["partial_json"] for k, d in events if k == "content_block_delta" and d["index"] == 1
    )
    assert text == "Listing the directory now." and json.loads(partial) == {"command": "ls -la /tmp"}
    assert [k for k, _ in events if k not in ("content_block_delta",)] == [
        "message_start",
        "content_block_start",
        "content_block_stop",
        "content_block_start",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def tiny_client() -> LocalModelClient:
    """A real client over the demo tiny model (weights load lazily, on the first request)."""
    return LocalModelClient(str(build_tiny_model(DEMO_RECIPE)))


def test_factory_gives_each_session_its_own_client_and_keys_are_unique():
    """A client factory is called once per session; keys are distinct and unguessable-length."""
    made = []

    def factory():
        made.append(tiny_client())
        return made[-1]

    proxy = ModelProxy(factory)
    first, second = proxy.open_session(), proxy.open_session()
    assert first.model_client is made[0] and second.model_client is made[1]
    assert first.key != second.key and len(first.key) > 40
    with pytest.raises(ValueError, match="needs a model_client"):
        ModelProxy().open_session()


def test_a_failing_listener_does_not_break_recording():
    """A listener that raises is logged and skipped; the call is still recorded and other listeners run."""
    session = ProxySession("k", tiny_client())
    seen = []
    session.add_listener(lambda kind, call: 1 / 0)
    session.add_listener(lambda kind, call: seen.append(kind))
    call = session.begin_call(
        "openai", "m", [{"role": "user", "content": "x"}], None, SamplingParams(), stream=False
    )
    session.finish_call(call, completion_with_call(), None, 0.01)
    assert seen == ["request", "response"] and session.completions()[0].text == "Listing the directory now."


def recorded(index: int, messages: list[dict], text: str, calls: list[ToolCall] | None = None) -> ProxyCall:
    done = Completion(
        text=text,
        tool_calls=calls or [],
        prompt_token_ids=[index],
        completion_token_ids=[100 + index, 7],
        logprobs=[-0.5, -0.1],
        usage=Usage(prompt_tokens=1, completion_tokens=2),
    )
    return ProxyCall(
        index=index, dialect="openai", messages=messages, params=SamplingParams(), completion=done
    )


def test_steps_follow_the_conversation_with_side_calls_and_repeated_messages():
    """Each message becomes one step once; a repeated "continue" is two steps; a side conversation does not
    disturb the main one; tool results land on the step that made the call."""
    ls = ToolCall(
        tool_call_id="c1",
        function_name="bash",
        arguments={"command": "ls"},
        raw_arguments='{"command": "ls"}',
    )
    system, go = {"role": "system", "content": "sys"}, {"role": "user", "content": "go"}
    asked = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command":"ls"}'}}
        ],
    }
    result = {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}
    done, more = {"role": "assistant", "content": "done"}, {"role": "user", "content": "continue"}
    calls = [
        recorded(0, [system, go], "", [ls]),
        recorded(1, [system, go, asked, result], "done"),
        recorded(2, [{"role": "user", "content": "summarise"}], "sum"),
        recorded(3, [system, go, asked, result, done, more], "again"),
        recorded(
            4, [system, go, asked, result, done, more, {"role": "assistant", "content": "again"}, more], "ok"
        ),
    ]
    steps = calls_to_steps(calls)
    assert [(s.source, s.message) for s in steps] == [
        ("system", "sys"),
        ("user", "go"),
        ("agent", ""),
        ("agent", "done"),
        ("user", "summarise"),
        ("agent", "sum"),
        ("user", "continue"),
        ("agent", "again"),
        ("user", "continue"),
        ("agent", "ok"),
    ]
    assert (
        steps[2].observation.results[0].content == "a.txt" and steps[2].tool_calls[0].function_name == "bash"
    )
    assert [s.step_id for s in steps] == list(range(1, 11))
    assert steps[-1].metrics.completion_token_ids == [104, 7] and steps[-1].metrics.loss_mask == [1, 1]
