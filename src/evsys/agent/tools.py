"""The loop agent's tools, run in the sandbox: `bash`, `read_file`, `write_file`, `str_replace`, `submit`.

Every call returns a `ToolOutcome` — never raises for the model's mistakes. A call that could not be parsed,
names an unknown tool or passes bad arguments becomes an error observation (with `error_kind` set so the agent
can count it). Long outputs are clipped to `max_output_chars` (head and tail kept, the middle elided, with a
note), so a 10 MB tool output costs the model a few thousand characters, not its context window.
"""

from __future__ import annotations

import shlex
from typing import Any, Literal

from pydantic import BaseModel

from evsys.records import ExecResult, ToolCall
from evsys.sandbox.base import Sandbox, SandboxError, ShellSession

ErrorKind = Literal["parse", "unknown_tool", "bad_arguments", "execution"]
READ_LIMIT_BYTES = 4 * 1024 * 1024


def _schema(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict:
    params = {"type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


_STR = {"type": "string"}
TOOL_SCHEMAS: list[dict[str, Any]] = [
    _schema(
        "bash",
        "Run a command in a persistent bash shell (cwd and variables persist); returns output and exit code.",
        {"command": {**_STR, "description": "The command line to run."}},
        ["command"],
    ),
    _schema("read_file", "Read a text file.", {"path": {**_STR, "description": "File path."}}, ["path"]),
    _schema(
        "write_file",
        "Create or overwrite a file with the given content (parent directories are created).",
        {
            "path": {**_STR, "description": "File path."},
            "content": {**_STR, "description": "Full file content."},
        },
        ["path", "content"],
    ),
    _schema(
        "str_replace",
        "Replace the one occurrence of old_str in a file with new_str (old_str must occur exactly once).",
        {"path": _STR, "old_str": _STR, "new_str": _STR},
        ["path", "old_str", "new_str"],
    ),
    _schema(
        "submit",
        "Finish the task. Call it once the work is done.",
        {"message": {**_STR, "description": "Optional summary."}},
        [],
    ),
]
_REQUIRED = {s["function"]["name"]: s["function"]["parameters"]["required"] for s in TOOL_SCHEMAS}
_KNOWN = {s["function"]["name"]: set(s["function"]["parameters"]["properties"]) for s in TOOL_SCHEMAS}


class ToolOutcome(BaseModel):
    """What a tool call produced: the observation text shown to the model, and how it went."""

    content: str
    error_kind: ErrorKind | None = None
    submitted: bool = False

    @property
    def is_error(self) -> bool:
        """True when the call failed (parse error, unknown tool, bad arguments, execution failure)."""
        return self.error_kind is not None


def clip(text: str, limit: int) -> str:
    """Keep the head and tail of `text` within `limit` characters, noting how much was elided."""
    if len(text) <= limit:
        return text
    half = max(limit // 2, 1)
    omitted = len(text) - 2 * half
    return f"{text[:half]}\n[... {omitted} characters omitted ...]\n{text[-half:]}"


def truncation_note(result: ExecResult) -> str:
    """Lines saying which streams of `result` lost their middle and how large they were ("" when none)."""
    note = ""
    for name, total, cut in (
        ("stdout", result.stdout_total_bytes, result.stdout_truncated),
        ("stderr", result.stderr_total_bytes, result.stderr_truncated),
    ):
        if cut:
            note += f"\n[{name} was {total:,} bytes; its middle is omitted above]"
    return note


def bash_observation(result: ExecResult, command_timeout: float) -> str:
    """What the model is shown for a `bash` call: stdout, then stderr (each with a marker where the sandbox
    dropped its middle), how large a cut stream was, then how the command ended unless it exited 0."""
    parts = [result.stdout_shown]
    if result.stderr_bytes or result.stderr_truncated:
        parts.append(result.stderr_shown)
    text = "\n".join(p.rstrip("\n") for p in parts if p)
    text += truncation_note(result)  # at the end, so it survives `clip` (which keeps head and tail)
    if result.timed_out:
        text += f"\n[command timed out after {command_timeout:g} s]"
    elif result.exit_code != 0:
        text += f"\n[exit code {result.exit_code}]"
    return text.strip("\n") or "[no output]"


class SandboxTools:
    """The tool set bound to one sandbox (and one persistent shell session)."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        workdir: str,
        command_timeout: float = 120.0,
        max_output_chars: int = 10_000,
    ) -> None:
        self.sandbox = sandbox
        self.workdir = workdir
        self.command_timeout = command_timeout
        self.max_output_chars = max_output_chars
        self._shell: ShellSession | None = None

    @staticmethod
    def schemas() -> list[dict[str, Any]]:
        """The OpenAI-shape schemas of every tool."""
        return TOOL_SCHEMAS

    async def close(self) -> None:
        """Close the shell session, if one was opened."""
        if self._shell is not None:
            await self._shell.close()
            self._shell = None

    async def call(self, call: ToolCall) -> ToolOutcome:
        """Run one tool call; the model's mistakes come back as error outcomes, never exceptions."""
        if call.parse_error is not None:
            return ToolOutcome(
                content=f"error: could not parse your tool call: {call.parse_error}", error_kind="parse"
            )
        if call.function_name not in _KNOWN:
            names = ", ".join(_KNOWN)
            return ToolOutcome(
                content=f"error: unknown tool {call.function_name!r}; available: {names}",
                error_kind="unknown_tool",
            )
        args = call.arguments
        problem = _check_arguments(call.function_name, args)
        if problem:
            return ToolOutcome(content=f"error: {call.function_name}: {problem}", error_kind="bad_arguments")
        try:
            outcome = await getattr(self, f"_{call.function_name}")(**args)
        except Exception as exc:  # a sandbox failure is shown to the model and counted
            return ToolOutcome(content=f"error: {call.function_name} failed: {exc}", error_kind="execution")
        return outcome.model_copy(update={"content": clip(outcome.content, self.max_output_chars)})

    async def _bash(self, command: str) -> ToolOutcome:
        if self._shell is None:
            self._shell = await self.sandbox.shell(cwd=self.workdir)
        result = await self._shell.run(command, timeout=self.command_timeout)
        return ToolOutcome(content=bash_observation(result, self.command_timeout))

    async def _read_file(self, path: str) -> ToolOutcome:
        quoted = shlex.quote(path)
        result = await self.sandbox.exec(
            f"test -f {quoted} || {{ echo 'no such file: '{quoted} >&2; exit 1; }}; "
            f"head -c {READ_LIMIT_BYTES} -- {quoted}",
            cwd=self.workdir,
            timeout=self.command_timeout,
        )
        if not result.ok:
            return ToolOutcome(
                content=f"error: {result.stderr.strip() or 'cannot read ' + path}", error_kind="execution"
            )
        return ToolOutcome(content=result.stdout_shown)

    async def _write_file(self, path: str, content: str) -> ToolOutcome:
        data = content.encode()
        try:
            await self.sandbox.write_file(path, data, cwd=self.workdir, timeout=self.command_timeout)
        except SandboxError as exc:
            return ToolOutcome(content=f"error: {exc}", error_kind="execution")
        return ToolOutcome(content=f"wrote {len(data)} bytes to {path}")

    async def _str_replace(self, path: str, old_str: str, new_str: str) -> ToolOutcome:
        current = await self._read_file(path)
        if current.is_error:
            return current
        count = current.content.count(old_str) if old_str else 0
        if count != 1:
            where = "not found" if count == 0 else f"found {count} times (it must be unique)"
            return ToolOutcome(content=f"error: old_str {where} in {path}", error_kind="bad_arguments")
        written = await self._write_file(path, current.content.replace(old_str, new_str, 1))
        if written.is_error:
            return written
        return ToolOutcome(content=f"replaced 1 occurrence in {path}")

    async def _submit(self, message: str = "") -> ToolOutcome:
        return ToolOutcome(content="submitted", submitted=True)


def _check_arguments(name: str, args: dict[str, Any]) -> str | None:
    missing = [key for key in _REQUIRED[name] if key not in args]
    if missing:
        return f"missing argument(s): {', '.join(missing)}"
    unknown = sorted(set(args) - _KNOWN[name])
    if unknown:
        return f"unknown argument(s): {', '.join(unknown)}; expected: {', '.join(sorted(_KNOWN[name]))}"
    wrong = [key for key, value in args.items() if not isinstance(value, str)]
    if wrong:
        return f"argument(s) must be strings: {', '.join(wrong)}"
    return None
