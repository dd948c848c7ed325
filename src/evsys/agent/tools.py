"""The loop agent's tools, run in the sandbox: `bash`, `read_file`, `write_file`, `str_replace`, `submit`.

Every call returns a `ToolOutcome` — never raises for the model's mistakes. A call that could not be parsed,
names an unknown tool or passes bad arguments becomes an error observation (with `error_kind` set so the agent
can count it). Long outputs are clipped to `max_output_chars` (head and tail kept, the middle elided, with a
note), so a 10 MB tool output costs the model a few thousand characters, not its context window.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel

from evsys.records import ExecResult, ToolCall
from evsys.sandbox.base import Sandbox, ShellSession
from evsys.sandbox.tools import BASH, READ_FILE, SANDBOX_TOOLS, WRITE_FILE

ErrorKind = Literal["parse", "unknown_tool", "bad_arguments", "execution"]


def _schema(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    params = {"type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


_STR = {"type": "string"}
# the sandbox tools (defined once, in evsys.sandbox.tools), then the loop's own: edit in place, and finish
TOOL_SCHEMAS: list[dict[str, Any]] = [
    *(tool.schema() for tool in SANDBOX_TOOLS.values()),
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
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[ToolOutcome]]] = {
            "bash": self._bash,
            "read_file": self._read_file,
            "write_file": self._write_file,
            "str_replace": self._str_replace,
            "submit": self._submit,
        }

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
            outcome = await self._handlers[call.function_name](args)
        except Exception as exc:  # a sandbox failure is shown to the model and counted
            return ToolOutcome(content=f"error: {call.function_name} failed: {exc}", error_kind="execution")
        return outcome.model_copy(update={"content": clip(outcome.content, self.max_output_chars)})

    # ToolRunner: where the sandbox tools run for this agent
    async def exec(self, command: str, *, stdin: bytes | None = None) -> ExecResult:
        """Run `command` as the trial's user in the working directory, within the command timeout."""
        return await self.sandbox.exec(command, cwd=self.workdir, timeout=self.command_timeout, stdin=stdin)

    async def shell(self, command: str) -> ExecResult:
        """Run `command` in the persistent shell session (opened on first use)."""
        if self._shell is None:
            self._shell = await self.sandbox.shell(cwd=self.workdir)
        return await self._shell.run(command, timeout=self.command_timeout)

    async def _bash(self, args: dict[str, Any]) -> ToolOutcome:
        result = await BASH.run(self, args)
        return ToolOutcome(content=bash_observation(result, self.command_timeout))

    async def _read_file(self, args: dict[str, Any]) -> ToolOutcome:
        result = await READ_FILE.run(self, args)
        if not result.ok:
            problem = result.stderr.strip() or f"cannot read {args['path']}"
            return ToolOutcome(content=f"error: {problem}", error_kind="execution")
        return ToolOutcome(content=result.stdout_shown)

    async def _write_file(self, args: dict[str, Any]) -> ToolOutcome:
        result = await WRITE_FILE.run(self, args)
        if not result.ok:
            problem = f"cannot write {args['path']}: {result.stderr.strip()}"
            return ToolOutcome(content=f"error: {problem}", error_kind="execution")
        return ToolOutcome(content=f"wrote {len(str(args['content']).encode())} bytes to {args['path']}")

    async def _str_replace(self, args: dict[str, Any]) -> ToolOutcome:
        path, old_str, new_str = str(args["path"]), str(args["old_str"]), str(args["new_str"])
        current = await self._read_file({"path": path})
        if current.is_error:
            return current
        count = current.content.count(old_str) if old_str else 0
        if count != 1:
            where = "not found" if count == 0 else f"found {count} times (it must be unique)"
            return ToolOutcome(content=f"error: old_str {where} in {path}", error_kind="bad_arguments")
        written = await self._write_file(
            {"path": path, "content": current.content.replace(old_str, new_str, 1)}
        )
        if written.is_error:
            return written
        return ToolOutcome(content=f"replaced 1 occurrence in {path}")

    async def _submit(self, args: dict[str, Any]) -> ToolOutcome:
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
