"""The tools a TRL environment exposes: one method per tool the served task offers, and `reply` for a task
whose environment answers the model's turns (its respond hook).

TRL reads an environment's tools from its class (every public method but `reset` and `get_reward`), renders
each with `transformers.utils.get_json_schema` (type hints and a Google docstring) and calls it with the
model's arguments. `tool_method(schema)` makes such a method from an evsys tool schema: the signature and
docstring say what the schema says, and the call goes to the episode unchanged, so evsys validates the
arguments exactly as under `evsys run -a loop` and `evsys serve` (a call that does not fit comes back as the
tool's error, and the function never runs).

`task_tool_schemas(task)` is what a task offers before any sandbox starts: its built-in tools (the four
sandbox tools when it names none: `get_reward` submits), its custom tools and `reply` when it has a respond
hook. TRL only continues a rollout after a tool call, so a task's conversation turns are calls of `reply`:
the message is the model's turn, the hook's answer is the tool's result.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Literal, Union

from evsys.agent.tools import TOOL_SCHEMAS
from evsys.agent.toolset import builtin_schemas
from evsys.integrations.episodes import REPLY, REPLY_SCHEMA
from evsys.task.models import Task
from evsys.task.turns import load_custom_tools

DEFAULT_SCHEMAS = [s for s in TOOL_SCHEMAS if s["function"]["name"] != "submit"]
"""What a task that names no tools offers through TRL: the sandbox tools (`get_reward` submits)."""

_JSON_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
    "null": type(None),
}


def _annotation(prop: dict[str, Any]) -> Any:
    """The Python type transformers turns back into `prop`'s JSON schema (as close as its hints allow)."""
    if prop.get("enum"):
        return Literal[tuple(prop["enum"])]
    options = prop.get("anyOf")
    if options:
        return Union[tuple(_annotation(option) for option in options)]  # noqa: UP007
    kind = prop.get("type")
    if isinstance(kind, list):
        return Union[tuple(_JSON_TYPES.get(k, Any) for k in kind)]  # noqa: UP007
    return _JSON_TYPES.get(str(kind), Any)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def google_docstring(spec: dict[str, Any]) -> str:
    """A tool's docstring in the Google style transformers reads a schema from, from its evsys schema."""
    lines = [spec.get("description") or f"The {spec['name']} tool.", "", "Args:"]
    for arg, prop in spec["parameters"].get("properties", {}).items():
        described = prop.get("description") or prop.get("title") or arg.replace("_", " ").capitalize()
        lines.append(f"    {arg}: {_one_line(described)}")
    return "\n".join(lines if len(lines) > 3 else lines[:1]) + "\n"


def _parameters(spec: dict[str, Any]) -> list[inspect.Parameter]:
    """The schema's arguments as keyword-only parameters (required ones without a default)."""
    required = set(spec["parameters"].get("required", []))
    params = []
    for arg, prop in spec["parameters"].get("properties", {}).items():
        default = inspect.Parameter.empty if arg in required else prop.get("default")
        kind = inspect.Parameter.KEYWORD_ONLY
        params.append(inspect.Parameter(arg, kind, default=default, annotation=_annotation(prop)))
    return params


def tool_method(schema: dict[str, Any]) -> Callable[..., str]:
    """An environment method for the tool `schema` describes: its signature and docstring render the
    schema; calling it hands the model's arguments, unchecked here, to the environment's `_tool`."""
    spec = schema["function"]
    name = str(spec["name"])

    def method(self: Any, **arguments: Any) -> str:
        return str(self._tool(name, arguments))

    params = _parameters(spec)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = google_docstring(spec)
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    method.__signature__ = inspect.Signature([self_param, *params], return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = {**{p.name: p.annotation for p in params}, "return": str}
    return method


def task_tool_schemas(task: Task) -> list[dict[str, Any]]:
    """What `task` offers through TRL, in the served episode's order, then `reply` when it has a respond
    hook; ValueError for MCP tools it names (their schemas come from servers started in the sandbox, after
    TRL has read the environment's tools) and for a custom tool named `reply`."""
    interaction = task.interaction
    if interaction.tools is None:
        builtins = DEFAULT_SCHEMAS
    else:
        builtins = builtin_schemas(interaction)
    mcp = interaction.mcp_tools()
    if mcp:
        raise ValueError(
            f"{task.name}: TRL's environment_factory cannot offer MCP tools ({', '.join(mcp)}): TRL reads "
            "the tools before a sandbox starts; use EvsysRolloutFunc, which runs the loop agent"
        )
    custom = [tool.schema for tool in load_custom_tools(interaction.custom_tools(), task.path)]
    schemas = [*builtins, *custom]
    if interaction.respond is not None:
        if any(s["function"]["name"] == REPLY for s in custom):
            raise ValueError(f"{task.name}: a custom tool named {REPLY!r} clashes with the respond hook's")
        schemas.append(REPLY_SCHEMA)
    return schemas
