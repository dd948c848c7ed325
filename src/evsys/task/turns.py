"""Author-defined turns and tools of a Python task: which tools the model is offered, the environment's reply
to each model turn, and how many turns there may be.

`VerifiedTask(tools=[...])` lists what the model is offered, in place of every built-in tool:
- a built-in tool's name (`bash`, `read_file`, `write_file`, `str_replace` need a sandbox; `submit` does not);
- a Python callable, a custom tool: its name is the function's, its JSON schema comes from its signature
  (pydantic: annotations, defaults, `Annotated[..., Field(description=...)]`) and its description is its
  docstring. A parameter named `state` is not the model's: it gets the episode's state dict (the one the
  respond hook gets). It is stored as its import reference (`pkg.mod:fn`, `/abs/file.py:fn`) so another
  process can load it again (a function of the script being run, `__main__:fn`, loads in this process only:
  the local executor); a lambda or a function defined inside another cannot be, and is refused. A reference
  string works the same way;
- a tool of one of the task's MCP servers (`mcp_servers`, as a task directory's
  `[[environment.mcp_servers]]`): `mcp__<server>__<tool>`, or `mcp__<server>` for all its tools.
Any other name is refused when the task is built, naming the known ones.

Custom tools are trusted author code that runs in the orchestrator's process (host-side, like verifier
functions), never in the sandbox; their arguments come from the model, so they are validated against the
schema (never evaluated) before the call, and the call is bounded in time (evsys.agent.host_tools).

`respond` is the environment's turn: `respond(history, state) -> str | Done | None` (sync or async), called
after every model turn that calls no tool, with the chat so far (a copy) and the episode's state: a dict the
hook and the custom tools share (a copy of the task's data at the start). A string is the environment's
reply (a user message the model answers next); `Done()` or None ends the episode. `max_turns` bounds the
model turns of such a task (default: the agent's own limit).
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.experimental.arguments_schema import generate_arguments_schema
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import SchemaValidator

from evsys.util.imports import import_module_or_file, importable_name, is_file_reference

STATE_PARAMETER = "state"
"""A custom tool's parameter of this name gets the episode's state (the respond hook's), not a model value."""
SANDBOX_TOOLS = ("bash", "read_file", "write_file", "str_replace")
"""The built-in tools that act in the sandbox (evsys.agent.tools defines them)."""
BUILTIN_TOOLS = (*SANDBOX_TOOLS, "submit")
MCP_PREFIX = "mcp__"


class Done(BaseModel):
    """What a `respond` hook returns to end the episode (None does the same)."""

    reason: str | None = None


class Interaction(BaseModel):
    """How the model interacts with a Python task: the tools it is offered (None: every built-in one and
    the task's MCP tools), the environment's `respond` hook, the turn limit and the data the hook starts
    its state from."""

    model_config = ConfigDict(extra="forbid")

    tools: list[str] | None = None
    respond: str | None = None
    max_turns: int | None = Field(None, ge=1)
    data: dict[str, Any] = Field(default_factory=dict)

    @property
    def multi_turn(self) -> bool:
        """True when the task has tools or a respond hook (a sandbox-free one then runs the loop agent)."""
        return bool(self.tools) or self.respond is not None

    def builtin_tools(self) -> list[str] | None:
        """The built-in tools offered (None: all of them)."""
        return None if self.tools is None else [t for t in self.tools if t in BUILTIN_TOOLS]

    def custom_tools(self) -> list[str]:
        """The custom tools' import references."""
        return [t for t in self.tools or [] if is_reference(t)]

    def mcp_tools(self) -> list[str] | None:
        """The MCP selections (`mcp__server__tool` or `mcp__server`); None: every MCP tool."""
        return None if self.tools is None else [t for t in self.tools if t.startswith(MCP_PREFIX)]


def is_reference(entry: str) -> bool:
    """True when a tools entry is an import reference (`module:fn`, `file.py:fn`) of a custom tool."""
    return ":" in entry and not entry.startswith(MCP_PREFIX)


def as_reference(value: Any, what: str) -> Any:
    """A callable as its import reference (strings and other values unchanged); a callable another process
    cannot import (a lambda, a local function, an instance) is refused."""
    if isinstance(value, str) or not callable(value):
        return value
    reference = importable_name(value) or _main_reference(value)
    if reference is None:
        label = getattr(value, "__qualname__", type(value).__name__)
        raise ValueError(
            f"{what} {label!r} cannot be imported by name (a lambda, a function defined inside another, or "
            "an object): define it at module level"
        )
    return reference


def _main_reference(value: Any) -> str | None:
    """`__main__:fn` for a module-level function of the running script: it loads again in this process
    (the local executor), not in another one."""
    main = sys.modules.get("__main__")
    name = getattr(value, "__qualname__", "")
    if getattr(value, "__module__", None) != "__main__" or "<" in name or "." in name:
        return None
    return f"__main__:{name}" if getattr(main, name, None) is value else None


@dataclass(frozen=True)
class CustomTool:
    """A custom tool loaded from its reference: the callable, its OpenAI-shape schema, its validator, its
    parameters the model fills (in order) and whether it takes the episode's `state`."""

    name: str
    reference: str
    fn: Callable[..., Any]
    schema: dict[str, Any]
    arguments: SchemaValidator
    parameters: tuple[str, ...]
    wants_state: bool

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The call's keyword arguments from the model's arguments (never `state`); pydantic's
        ValidationError when they do not fit the signature."""
        args, kwargs = self.arguments.validate_python(arguments)
        return {**dict(zip(self.parameters, args, strict=False)), **kwargs}


def _skip_state(index: int, name: str, annotation: Any) -> Literal["skip"] | None:
    return "skip" if name == STATE_PARAMETER else None


def custom_tool(fn: Callable[..., Any], reference: str) -> CustomTool:
    """`fn` as a tool: schema from its signature (pydantic) and docstring, less a `state` parameter (the
    episode's state, never the model's); ValueError when its signature cannot be one (positional-only or
    variadic parameters, types without a JSON schema)."""
    if not inspect.isfunction(fn) and not inspect.ismethod(fn):
        raise ValueError(f"custom tool {reference!r} must be a function, got {type(fn).__name__}")
    params = list(inspect.signature(fn).parameters.values())
    for param in params:
        if param.kind in (param.POSITIONAL_ONLY, param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ValueError(f"custom tool {fn.__name__!r}: parameter {param.name!r} must be a named one")
    try:
        arguments = generate_arguments_schema(fn, parameters_callback=_skip_state)
        parameters = GenerateJsonSchema().generate(arguments)
        validator = SchemaValidator(arguments)
    except Exception as exc:
        raise ValueError(f"custom tool {fn.__name__!r}: no JSON schema for its signature: {exc}") from None
    parameters["additionalProperties"] = False
    description = inspect.getdoc(fn) or f"The {fn.__name__} tool."
    schema = {"name": fn.__name__, "description": description, "parameters": parameters}
    names = tuple(p.name for p in params if p.name != STATE_PARAMETER)
    wants_state = STATE_PARAMETER in {p.name for p in params}
    return CustomTool(
        fn.__name__, reference, fn, {"type": "function", "function": schema}, validator, names, wants_state
    )


def load_hook(reference: str, base_dir: Path | None, what: str) -> Callable[..., Any]:
    """The callable an import reference names (a relative `.py` path resolves against `base_dir`)."""
    module_part, _, attr = reference.rpartition(":")
    module = import_module_or_file(module_part, base_dir)
    fn: object = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"{what} {reference!r}: {module_part!r} has no callable {attr!r}")
    return fn


def load_custom_tools(references: Sequence[str], base_dir: Path | None = None) -> list[CustomTool]:
    """The custom tools of a task, loaded from their references."""
    return [custom_tool(load_hook(ref, base_dir, "custom tool"), ref) for ref in references]


def _relative_file(reference: str) -> bool:
    module = reference.rpartition(":")[0]
    return is_file_reference(module) and not Path(module).is_absolute()


@functools.lru_cache(maxsize=256)
def _tool_name(reference: str) -> str:
    """The name of the custom tool `reference` names, once per reference (a dataset's rows share them)."""
    return custom_tool(load_hook(reference, None, "custom tool"), reference).name


def _known(entry: str, servers: Sequence[str]) -> bool:
    """A built-in tool, or an MCP selection naming one of the task's servers."""
    if entry in BUILTIN_TOOLS:
        return True
    server = entry.removeprefix(MCP_PREFIX).split("__")[0]
    return entry.startswith(MCP_PREFIX) and server in servers


def check_tools(entries: Sequence[str], has_sandbox: bool, servers: Sequence[str] = ()) -> None:
    """Refuse unknown names (naming the known ones), names taken twice, and sandbox tools without a
    sandbox; load each custom tool once so a bad signature is refused here, not mid-run. `servers`: the
    task's MCP server names."""
    names: list[str] = []
    for entry in entries:
        if is_reference(entry) and _relative_file(entry):
            continue  # loaded by the run, relative to the dataset's directory
        if is_reference(entry):
            names.append(_tool_name(entry))
        elif _known(entry, servers):
            names.append(entry)
        else:
            known = ", ".join([*BUILTIN_TOOLS, *(f"{MCP_PREFIX}{s}__<tool>" for s in servers)])
            raise ValueError(
                f"unknown tool {entry!r}: known tools are {known}, or a Python function (a callable or its "
                "'module:function' reference)"
            )
    taken = sorted({name for name in names if names.count(name) > 1})
    if taken:
        raise ValueError(f"tool name {taken[0]!r} is offered twice; every tool needs its own name")
    needs_sandbox = [n for n in names if n in SANDBOX_TOOLS or n.startswith(MCP_PREFIX)]
    if needs_sandbox and not has_sandbox:
        raise ValueError(f"tools need a sandbox ({', '.join(needs_sandbox)}): set sandbox=true or drop them")
