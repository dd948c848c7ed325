"""The sandbox tools, each defined once (schema and implementation together): `bash`, `read_file`,
`write_file`.

A `SandboxTool` is what a model sees (name, description, JSON-schema parameters: `schema()` gives the OpenAI
shape) and what runs (`run(runner, args) -> ExecResult`). The tools run through a `ToolRunner`, which says
where and as whom: the loop agent's runner (evsys.agent.tools, also what `evsys serve` and its `/mcp` serve)
runs `bash` in a persistent shell session and the rest as the trial's user in its working directory; the slot
API's (evsys.sandbox.slots) runs everything as the slot's user in its workspace. How a result is shown differs
(an observation for a model, a structured result for an environment's hooks); what the tool does does not.
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from evsys.records import ExecResult
from evsys.sandbox.base import write_file_command

READ_LIMIT_BYTES = 4 * 1024 * 1024


class ToolRunner(Protocol):
    """Where sandbox tools run: `exec` one command (stdin optional), `shell` one command in the caller's
    stateful shell (a runner without one runs it like `exec`)."""

    async def exec(self, command: str, *, stdin: bytes | None = None) -> ExecResult:
        """Run `command` once with `bash -c`."""
        ...

    async def shell(self, command: str) -> ExecResult:
        """Run `command` in the stateful shell (cwd and variables persist between calls)."""
        ...


ToolImpl = Callable[[ToolRunner, dict[str, Any]], Awaitable[ExecResult]]


@dataclass(frozen=True)
class SandboxTool:
    """One tool: its schema (`name`, `description`, `parameters` properties, `required`) and `run`."""

    name: str
    description: str
    parameters: dict[str, Any]
    required: tuple[str, ...]
    run: ToolImpl

    def schema(self) -> dict[str, Any]:
        """The tool in OpenAI shape: {"type": "function", "function": {name, description, parameters}}."""
        params = {"type": "object", "properties": self.parameters, "required": list(self.required)}
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }


def read_file_command(path: str) -> str:
    """The first READ_LIMIT_BYTES of regular file `path`; "no such file: <path>" on stderr when it is none."""
    q = shlex.quote(path)
    return f"test -f {q} || {{ echo 'no such file: '{q} >&2; exit 1; }}; head -c {READ_LIMIT_BYTES} -- {q}"


async def _bash(runner: ToolRunner, args: dict[str, Any]) -> ExecResult:
    return await runner.shell(str(args["command"]))


async def _read_file(runner: ToolRunner, args: dict[str, Any]) -> ExecResult:
    return await runner.exec(read_file_command(str(args["path"])))


async def _write_file(runner: ToolRunner, args: dict[str, Any]) -> ExecResult:
    return await runner.exec(write_file_command(str(args["path"])), stdin=str(args["content"]).encode())


_STR = {"type": "string"}
BASH = SandboxTool(
    "bash",
    "Run a command in a persistent bash shell (cwd and variables persist); returns output and exit code.",
    {"command": {**_STR, "description": "The command line to run."}},
    ("command",),
    _bash,
)
READ_FILE = SandboxTool(
    "read_file", "Read a text file.", {"path": {**_STR, "description": "File path."}}, ("path",), _read_file
)
WRITE_FILE = SandboxTool(
    "write_file",
    "Create or overwrite a file with the given content (parent directories are created).",
    {"path": {**_STR, "description": "File path."}, "content": {**_STR, "description": "Full file content."}},
    ("path", "content"),
    _write_file,
)
SANDBOX_TOOLS: dict[str, SandboxTool] = {tool.name: tool for tool in (BASH, READ_FILE, WRITE_FILE)}
"""Every sandbox tool by name."""
