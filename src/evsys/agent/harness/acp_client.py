"""The client side of the Agent Client Protocol (ACP) for an evsys harness: what the harness asks of its
editor, served inside the trial's sandbox.

`SandboxAcpClient` implements the SDK's `acp.Client` interface:
- `session_update` notifications become `HarnessEvent`s (agent text, thoughts, tool calls and their results)
  on the adapter's event queue;
- `read_text_file` / `write_text_file` read and write through the adapter's `ProcessLauncher` (as the
  sandbox's agent user, so the harness can touch only what that user can);
- `create_terminal` and friends run the command through the same launcher (`terminals.py`);
- `request_permission` is answered by `grant_permission`, the documented auto-grant policy: the sandbox is
  the boundary, so every request is granted, once (`allow_once`, else `allow_always`); a request offering no
  allow option is cancelled. Each decision is an event (`permission`) in the turn's log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from acp import RequestError
from acp.schema import (
    AllowedOutcome,
    CreateTerminalResponse,
    DeclineElicitationResponse,
    DeniedOutcome,
    ElicitationMode,
    EnvVariable,
    KillTerminalResponse,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalOutputResponse,
    ToolCallUpdate,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from evsys.agent.harness.acp_terminals import Terminals
from evsys.agent.harness.events import HarnessEvent, HarnessEventType
from evsys.agent.harness.process import ProcessLauncher

GRANT_ORDER = ("allow_once", "allow_always")
"""Permission options evsys picks, in order of preference (the first one offered is chosen)."""


def grant_permission(options: list[PermissionOption]) -> RequestPermissionResponse:
    """The auto-grant policy: `allow_once` if offered, else `allow_always`, else cancelled."""
    for kind in GRANT_ORDER:
        for option in options:
            if option.kind == kind:
                return RequestPermissionResponse(
                    outcome=AllowedOutcome(option_id=option.option_id, outcome="selected")
                )
    return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))


def _content_text(content: Any) -> str:
    """The text of an ACP content block (or of a tool call's content list)."""
    if isinstance(content, list):
        return "".join(_content_text(c) for c in content)
    inner = getattr(content, "content", None)
    if inner is not None and not isinstance(content, str):
        return _content_text(inner)
    text = getattr(content, "text", None)
    return text if isinstance(text, str) else ""


def update_events(update: Any, turn: int) -> list[HarnessEvent]:
    """The harness events one `session/update` stands for (none for plans, commands and mode changes)."""
    kind = getattr(update, "session_update", "")
    data: dict[str, Any]
    if kind == "agent_message_chunk":
        event_type, data = HarnessEventType.TEXT_OUTPUT, {"text": _content_text(update.content)}
    elif kind == "agent_thought_chunk":
        event_type, data = HarnessEventType.LLM_CHUNK, {"reasoning": _content_text(update.content)}
    elif kind == "tool_call":
        event_type = HarnessEventType.TOOL_CALL
        data = {
            "id": update.tool_call_id,
            "name": update.title,
            "kind": update.kind,
            "arguments": update.raw_input,
        }
    elif kind == "tool_call_update" and update.status in ("completed", "failed"):
        event_type = HarnessEventType.TOOL_RESULT
        output = update.raw_output if update.raw_output is not None else _content_text(update.content or [])
        data = {"id": update.tool_call_id, "output": output, "is_error": update.status == "failed"}
    else:
        return []
    return [HarnessEvent(type=event_type, data=data, turn=turn)]


class SandboxAcpClient:
    """An `acp.Client` whose files and terminals are the sandbox's, and whose updates become events."""

    def __init__(
        self,
        launcher: ProcessLauncher,
        emit: Callable[[HarnessEvent], None],
        current_turn: Callable[[], int],
        *,
        base_env: dict[str, str] | None = None,
    ) -> None:
        self.launcher = launcher
        self.emit = emit
        self.current_turn = current_turn
        self.terminals = Terminals(launcher, base_env or {})
        self.permissions: list[dict[str, Any]] = []

    def on_connect(self, conn: Any) -> None:
        """Nothing to keep: the adapter holds the connection."""

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        """Map the update onto harness events."""
        for event in update_events(update, self.current_turn()):
            self.emit(event)

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kwargs: Any
    ) -> RequestPermissionResponse:
        """Grant per `grant_permission`; the decision is recorded as an event."""
        response = grant_permission(options)
        outcome = response.outcome
        decision = {
            "tool_call_id": tool_call.tool_call_id,
            "title": tool_call.title,
            "options": [o.kind for o in options],
            "chosen": outcome.option_id if isinstance(outcome, AllowedOutcome) else None,
        }
        self.permissions.append(decision)
        self.emit(
            HarnessEvent(
                type=HarnessEventType.TOOL_CALL, data={"permission": decision}, turn=self.current_turn()
            )
        )
        return response

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kwargs: Any
    ) -> ReadTextFileResponse:
        """The file's text from the sandbox (from 1-based `line`, at most `limit` lines)."""
        data = await self.launcher.read_file(path)
        if data is None:
            raise RequestError.resource_not_found(path)
        lines = data.decode("utf-8", "replace").splitlines(keepends=True)
        start = max((line or 1) - 1, 0)
        end = None if limit is None else start + limit
        return ReadTextFileResponse(content="".join(lines[start:end]))

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse:
        """Write the file in the sandbox as the agent user."""
        try:
            await self.launcher.write_file(path, content.encode())
        except OSError as exc:
            raise RequestError.internal_error({"path": path, "error": str(exc)}) from exc
        return WriteTextFileResponse()

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        """Start the command in the sandbox; its output is collected until released."""
        variables = {v.name: v.value for v in env or []}
        terminal_id = await self.terminals.create(command, args or [], variables, cwd, output_byte_limit)
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        """The output so far, and the exit status once it exited."""
        return self.terminals.get(terminal_id).output()

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        """Wait for the command to exit."""
        status = await self.terminals.get(terminal_id).wait()
        return WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> KillTerminalResponse:
        """Kill the command (the terminal stays readable)."""
        await self.terminals.get(terminal_id).kill()
        return KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse:
        """Kill the command if running and forget the terminal."""
        await self.terminals.release(terminal_id)
        return ReleaseTerminalResponse()

    async def create_elicitation(
        self, message: str, mode: ElicitationMode, **kwargs: Any
    ) -> DeclineElicitationResponse:
        """Questions for a user are declined: no user is there during a trial."""
        self.emit(
            HarnessEvent(
                type=HarnessEventType.ERROR,
                data={"kind": "elicitation", "message": f"declined: {message}"},
                turn=self.current_turn(),
            )
        )
        return DeclineElicitationResponse(action="decline")

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        """Nothing to do: no elicitation is ever accepted."""

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Extension methods are not supported."""
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        """Extension notifications are ignored."""

    async def close(self) -> None:
        """Kill every terminal still running."""
        await asyncio.gather(
            *(self.terminals.release(t) for t in list(self.terminals.ids())), return_exceptions=True
        )
