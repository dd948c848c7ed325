"""The trajectory record every trial writes as `trajectory.json`: ATIF-compatible, plus token-level RL fields.

The layout follows the Agent Trajectory Interchange Format (v1.8): `schema_version`, `session_id`, `agent`,
`steps[]`, `final_metrics`. Each step's `metrics` may additionally carry `prompt_token_ids`,
`completion_token_ids`, `logprobs` and a `loss_mask` (1 = a token the policy produced and should learn from,
0 = context), so a trainer can read token-exact data straight from the file. Unknown fields are kept.

`TrajectoryRecorder` is what agents append to while they run; the trial turns it into a `Trajectory`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

ATIF_SCHEMA_VERSION = "ATIF-v1.8"

StepSource = Literal["system", "user", "agent"]


def utc_now() -> str:
    """The current time as an ISO-8601 UTC string (what every record in evsys uses)."""
    return datetime.now(UTC).isoformat()


class _Open(BaseModel):
    """A record that keeps fields it does not know (newer ATIF versions, harness-specific extras)."""

    model_config = ConfigDict(extra="allow")


class Usage(_Open):
    """Tokens and money spent by a model call, a step, an agent run or a whole job (add them with `+`)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = Field(0.0, description="US dollars; None when a call's price is unknown.")

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cost_usd=add_costs(self.cost_usd, other.cost_usd),
        )


def add_costs(first: float | None, second: float | None) -> float | None:
    """The sum of two costs; unknown (None) when either is unknown."""
    return None if first is None or second is None else first + second


class ToolCall(_Open):
    """One tool call: what a model asked for (`Completion.tool_calls`) and what a trajectory step records.

    `arguments` are the parsed arguments ({} when they do not parse; `parse_error` then says why, and the
    agent shows it to the model). `raw_arguments` is the arguments' JSON text exactly as the model wrote it,
    when the call came from a model response; calls a harness reported have none. Both are left out of the
    JSON when unset, so a trajectory step's call is ATIF's (`tool_call_id`, `function_name`, `arguments`)."""

    tool_call_id: str
    function_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw_arguments: str | None = None
    parse_error: str | None = None

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in ("raw_arguments", "parse_error"):
            if data.get(key, 0) is None:
                del data[key]
        return data

    def arguments_json(self) -> str:
        """The arguments as JSON text: as the model wrote them, else serialised from `arguments`."""
        if self.raw_arguments is not None:
            return self.raw_arguments
        return json.dumps(self.arguments, ensure_ascii=False)


class ObservationResult(_Open):
    """What one tool call returned."""

    source_call_id: str | None = None
    content: Any = None


class Observation(_Open):
    """The results of a step's tool calls."""

    results: list[ObservationResult] = Field(default_factory=list)


class SampledCompletion(Protocol):
    """What `StepMetrics.from_completion` reads of one model call (an `evsys.model.Completion`)."""

    @property
    def usage(self) -> Usage: ...
    @property
    def cost_usd(self) -> float | None: ...
    @property
    def prompt_token_ids(self) -> list[int] | None: ...
    @property
    def completion_token_ids(self) -> list[int] | None: ...
    @property
    def logprobs(self) -> list[float] | None: ...
    @property
    def weights_version(self) -> int | None: ...


class StepMetrics(_Open):
    """Token counts, cost and (for RL) the exact token ids, sampling logprobs and loss mask of one step."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    loss_mask: list[int] | None = None
    weights_version: int | None = Field(
        None, description="Version of the policy weights that sampled this step, when the model reports one."
    )

    @model_serializer(mode="wrap")
    def _omit_unknown_version(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("weights_version", 0) is None:  # left out unless known: ATIF has no such field
            del data["weights_version"]
        return data

    @classmethod
    def from_completion(cls, completion: SampledCompletion, **extra: Any) -> StepMetrics:
        """Metrics of one model call (an `evsys.model.Completion`): usage, cost (None: unknown), token ids,
        sampling logprobs and a loss mask covering exactly the generated tokens; `extra` adds fields."""
        ids = completion.completion_token_ids
        return cls(
            prompt_tokens=completion.usage.prompt_tokens,
            completion_tokens=completion.usage.completion_tokens,
            cached_tokens=completion.usage.cached_tokens,
            cost_usd=completion.cost_usd,
            prompt_token_ids=completion.prompt_token_ids,
            completion_token_ids=ids,
            logprobs=completion.logprobs,
            loss_mask=[1] * len(ids) if ids is not None else None,
            weights_version=completion.weights_version,
            **extra,
        )


class Step(_Open):
    """One step: a system/user message, or an agent turn with its tool calls and observations."""

    step_id: int
    timestamp: str = Field(default_factory=utc_now)
    source: StepSource
    message: str = ""
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    observation: Observation | None = None
    metrics: StepMetrics | None = None


class AgentInfo(_Open):
    """Who produced the trajectory."""

    name: str
    version: str = "unknown"
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None


class FinalMetrics(_Open):
    """Totals over the whole trajectory."""

    total_prompt_tokens: int = 0
    total_completion_tokens: int = 0
    total_cached_tokens: int = 0
    total_cost_usd: float | None = Field(0.0, description="None when some call's price is unknown.")
    total_steps: int = 0


class Trajectory(_Open):
    """An ATIF-compatible trajectory (`trajectory.json`)."""

    schema_version: str = ATIF_SCHEMA_VERSION
    session_id: str
    agent: AgentInfo
    steps: list[Step] = Field(default_factory=list)
    final_metrics: FinalMetrics = Field(default_factory=FinalMetrics)


def _metrics_usage(metrics: StepMetrics | None) -> Usage:
    if metrics is None:
        return Usage()
    return Usage(
        prompt_tokens=metrics.prompt_tokens or 0,
        completion_tokens=metrics.completion_tokens or 0,
        cached_tokens=metrics.cached_tokens or 0,
        cost_usd=_step_cost(metrics),
    )


def _step_cost(metrics: StepMetrics) -> float | None:
    """A step's cost: unknown for a model call with no price, 0 for a step that called no model."""
    if metrics.cost_usd is not None:
        return metrics.cost_usd
    return None if metrics.completion_tokens else 0.0


class TrajectoryRecorder:
    """Collects a trial's steps while the agent runs; `build()` returns the finished `Trajectory`.

    Agents call `add(source, message, ...)` once per message or model turn; step ids are assigned in order.
    """

    def __init__(self, session_id: str, agent: AgentInfo) -> None:
        self.session_id = session_id
        self.agent = agent
        self.steps: list[Step] = []

    def add(self, source: StepSource, message: str = "", **fields: Any) -> Step:
        """Append a step (`tool_calls`, `observation`, `metrics`, `reasoning_content`... as keywords)."""
        step = Step(step_id=len(self.steps) + 1, source=source, message=message, **fields)
        self.steps.append(step)
        return step

    def extend(self, steps: list[Step]) -> None:
        """Append steps built elsewhere (e.g. returned by an agent), renumbering them to follow on."""
        for step in steps:
            self.steps.append(step.model_copy(update={"step_id": len(self.steps) + 1}))

    def usage(self) -> Usage:
        """The sum of the recorded steps' token counts and cost."""
        total = Usage()
        for step in self.steps:
            total = total + _metrics_usage(step.metrics)
        return total

    def build(self, usage: Usage | None = None) -> Trajectory:
        """The trajectory with `final_metrics` summed over the steps (`usage`: that sum, when the caller
        has it already)."""
        usage = usage if usage is not None else self.usage()
        final = FinalMetrics(
            total_prompt_tokens=usage.prompt_tokens,
            total_completion_tokens=usage.completion_tokens,
            total_cached_tokens=usage.cached_tokens,
            total_cost_usd=usage.cost_usd,
            total_steps=len(self.steps),
        )
        return Trajectory(
            session_id=self.session_id, agent=self.agent, steps=list(self.steps), final_metrics=final
        )
