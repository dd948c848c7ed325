"""Reading a tool call off the wire: its JSON arguments parsed, or why they do not parse (kept on it)."""

from __future__ import annotations

import json

from evsys.records import ToolCall


def parse_tool_call(name: str, arguments: str, call_id: str) -> ToolCall:
    """A ToolCall from a wire tool call (`arguments` a JSON string), recording why it does not parse."""
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError as exc:
        return ToolCall(
            tool_call_id=call_id,
            function_name=name,
            raw_arguments=arguments,
            parse_error=f"invalid JSON: {exc.msg}",
        )
    if not isinstance(parsed, dict):
        return ToolCall(
            tool_call_id=call_id,
            function_name=name,
            raw_arguments=arguments,
            parse_error="arguments must be a JSON object",
        )
    return ToolCall(tool_call_id=call_id, function_name=name, arguments=parsed, raw_arguments=arguments)
