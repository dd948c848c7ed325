"""The OpenEnv wire protocol as evsys serves it: messages, actions, observations, errors.

WebSocket `/ws` (one episode per connection): the client sends `{"type": "reset", "data": {seed, episode_id,
task}}`, `{"type": "step", "data": <action>}`, `{"type": "state"}`, `{"type": "mcp", "data": <JSON-RPC>}` or
`{"type": "close"}`; the server answers `{"type": "observation", "data": {observation, reward, done}}`,
`{"type": "state", "data": {...}}`, `{"type": "mcp", "data": <JSON-RPC response>}` or `{"type": "error",
"data": {message, code}}` — exactly one answer per request, in order. A request may carry an `id` (any JSON
scalar); its answer echoes it, so a client can correlate answers with requests.

An action is OpenEnv's MCP action shape, so `openenv-core`'s `MCPToolClient` and `GenericEnvClient` both work:
`{"type": "call_tool", "tool_name": "bash", "arguments": {"command": "ls"}}` or `{"type": "list_tools"}`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ErrorCode(StrEnum):
    """The `code` of an error answer (OpenEnv's codes, plus the ones evsys adds)."""

    INVALID_JSON = "INVALID_JSON"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    CAPACITY_REACHED = "CAPACITY_REACHED"
    SESSION_ERROR = "SESSION_ERROR"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    NO_EPISODE = "NO_EPISODE"
    UNKNOWN_TASK = "UNKNOWN_TASK"


class ServeError(Exception):
    """A request the server refuses: answered with `code` and `message`, the session stays usable."""

    def __init__(self, code: ErrorCode, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.extra = extra

    def payload(self) -> dict[str, Any]:
        """The error answer's `data`."""
        return {"message": str(self), "code": self.code.value, **self.extra}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CallToolAction(_Strict):
    """Run one tool of the episode (`bash`, `read_file`, `write_file`, `str_replace`, `submit`)."""

    type: Literal["call_tool"] = "call_tool"
    tool_name: str = Field(min_length=1, max_length=128)
    arguments: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)


class ListToolsAction(_Strict):
    """List the episode's tools (costs no step)."""

    type: Literal["list_tools"] = "list_tools"
    metadata: dict[str, Any] = Field(default_factory=dict)


class MessageAction(_Strict):
    """One conversational turn with this message: to the harness (`--harness`), or the model's turn that a
    Python task's respond hook answers."""

    type: Literal["message"] = "message"
    message: str = Field(min_length=1)
    metadata: dict[str, Any] = Field(default_factory=dict)


Action = Annotated[CallToolAction | ListToolsAction | MessageAction, Field(discriminator="type")]


class ActionModel(BaseModel):
    """Wrapper validating an action's JSON (the `/schema` action schema is this union)."""

    action: Action


class ResetParams(BaseModel):
    """`reset` parameters: a task chosen by `task` (its name) or by `seed` (index modulo the task count)."""

    model_config = ConfigDict(extra="ignore")

    seed: int | None = Field(None, ge=0)
    episode_id: str | None = Field(None, max_length=255)
    task: str | None = Field(None, max_length=255, description="A task's name; wins over `seed`.")
    group_id: str | None = Field(
        None,
        min_length=1,
        max_length=255,
        description="The samples this episode is compared with (e.g. a GRPO group): episodes reset with the "
        "same group_id form one group in exports; without one, the session's episodes form their own.",
    )


class ToolError(_Strict):
    """Why a tool call could not run (unknown tool, bad arguments): the step did not count."""

    error_type: Literal["tool_not_found", "invalid_args", "execution_error", "timeout"]
    message: str


class ServedObservation(_Strict):
    """What a step or reset returns (besides `reward` and `done`, which travel beside it)."""

    task: str | None = Field(None, description="The episode's task (set by reset).")
    instruction: str | None = Field(None, description="What the agent is asked to do (set by reset).")
    tool_name: str | None = Field(None, description="The tool a step called.")
    result: dict[str, Any] | None = Field(None, description="The tool's output: {data, is_error, content}.")
    error: ToolError | None = None
    tools: list[dict[str, Any]] | None = Field(None, description="Set by list_tools.")
    text: str | None = Field(
        None,
        description="Harness mode: the turn's text output. A message to a task with a respond hook: the "
        "environment's reply.",
    )
    events: list[dict[str, Any]] | None = Field(
        None, description="Harness mode: the turn's events (unless they were streamed as `event` frames)."
    )
    metadata: dict[str, Any] = Field(default_factory=dict)


class ServedState(BaseModel):
    """`state()`: the session's episode."""

    episode_id: str | None = None
    step_count: int = 0
    task: str | None = None
    trial_name: str | None = None
    done: bool = False
    reward: float | None = None
    max_steps: int | None = None


def observation_payload(observation: ServedObservation, reward: float | None, done: bool) -> dict[str, Any]:
    """The `data` of an observation answer (OpenEnv's `{observation, reward, done}`)."""
    return {
        "observation": observation.model_dump(mode="json", exclude_none=True),
        "reward": reward,
        "done": done,
    }


def schemas() -> dict[str, Any]:
    """`/schema`: the JSON schemas of actions, observations and state."""
    action = ActionModel.model_json_schema()
    defs = action.pop("$defs", {})
    union = {**action["properties"]["action"], "$defs": defs}
    return {
        "action": union,
        "observation": ServedObservation.model_json_schema(),
        "state": ServedState.model_json_schema(),
    }
