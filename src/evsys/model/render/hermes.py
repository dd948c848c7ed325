"""Tool calls in the Hermes convention (most open tool-calling models follow it; so does evsys's template):
parse `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks out of generated text.

Malformed calls never raise: they come back as a `ToolCall` whose `parse_error` says what is wrong, so the
agent can show the model an error observation and count it.
"""

from __future__ import annotations

import json
import re
import uuid

from evsys.records import ToolCall

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN_TAG) + r"(.*?)(?:" + re.escape(CLOSE_TAG) + r"|\Z)", re.DOTALL)


def new_call_id() -> str:
    """A fresh tool-call id in OpenAI's style."""
    return "call_" + uuid.uuid4().hex[:24]


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """Split `text` into the visible content (before the first tool call) and the tool calls it contains."""
    first = text.find(OPEN_TAG)
    if first < 0:
        return text, []
    content = text[:first].rstrip("\n")
    calls = [_parse_block(match.group(1)) for match in _BLOCK.finditer(text, first)]
    return content, calls


def _parse_block(body: str) -> ToolCall:
    raw = body.strip()
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        return _broken(raw, f"tool call is not valid JSON ({exc.msg} at char {exc.pos}): {raw[:200]!r}")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return _broken(raw, f'tool call must be a JSON object with a "name" string: {raw[:200]!r}')
    arguments = obj.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return ToolCall(
                tool_call_id=new_call_id(),
                function_name=obj["name"],
                raw_arguments=obj["arguments"],
                parse_error=f"arguments of {obj['name']!r} are not valid JSON ({exc.msg})",
            )
    if not isinstance(arguments, dict):
        return ToolCall(
            tool_call_id=new_call_id(),
            function_name=obj["name"],
            raw_arguments=json.dumps(arguments),
            parse_error=f"arguments of {obj['name']!r} must be a JSON object, got {type(arguments).__name__}",
        )
    return ToolCall(
        tool_call_id=new_call_id(),
        function_name=obj["name"],
        arguments=arguments,
        raw_arguments=json.dumps(arguments, ensure_ascii=False),
    )


def _broken(raw: str, error: str) -> ToolCall:
    name = ""
    match = re.search(r'"name"\s*:\s*"([^"]*)"', raw)
    if match:
        name = match.group(1)
    return ToolCall(tool_call_id=new_call_id(), function_name=name, raw_arguments=raw, parse_error=error)
