"""`SingleTurnAgent`: one model call, no sandbox, no tools — how a Python task without a sandbox is answered.

The chat is the task's system prompt (else the agent kwarg `system_prompt`) and the prompt; sampling comes
from the agent kwargs (`max_tokens`, `temperature`, `top_p`, `seed` — the loop agent's key names). The call
is recorded as system/user/agent steps with prompt ids, completion ids, sampling logprobs and a loss mask.
A model error raises with `failure_cause = "model_error"` (the trial records and may retry it).
"""

from __future__ import annotations

from typing import Any

from evsys.agent.base import Agent, AgentContext, AgentError, AgentResult
from evsys.model.base import Message, SamplingParams
from evsys.records import StepMetrics
from evsys.sandbox.base import Sandbox

DEFAULT_MAX_TOKENS = 512
SAMPLING_KEYS = ("temperature", "top_p", "seed", "max_tokens")


def sampling_params(kwargs: dict[str, Any]) -> SamplingParams:
    """The sampling settings of a single-turn trial, from the agent kwargs (loop-agent key names)."""
    values = {key: kwargs[key] for key in SAMPLING_KEYS if kwargs.get(key) is not None}
    values.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
    return SamplingParams(**values)


def prompt_messages(prompt: str, system_prompt: str | None) -> list[Message]:
    """The chat a single-turn trial sends: the system prompt (if any), then the prompt."""
    messages: list[Message] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": prompt})
    return messages


class SingleTurnAgent(Agent):
    """One completion for the instruction; `sandbox` is ignored (None for tasks that start none)."""

    name = "single-turn"
    version = "1.0"

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = dict(kwargs)

    async def setup(self, sandbox: Sandbox | None, ctx: AgentContext) -> None:
        """Nothing to prepare."""

    async def run(self, instruction: str, sandbox: Sandbox | None, ctx: AgentContext) -> AgentResult:
        """Send the chat, record it; `AgentError` when no model was given."""
        if ctx.model_client is None:
            raise AgentError(
                f"Python task {ctx.task.name!r} needs a model: run it with a model agent (-a loop -m <model>)"
            )
        system = ctx.task.system_prompt or self.kwargs.get("system_prompt")
        messages = prompt_messages(instruction, system)
        for message in messages:
            ctx.trajectory.add(message["role"], message["content"])
        completion = await ctx.model_client.complete(messages, params=sampling_params(self.kwargs))
        ctx.trajectory.add(
            "agent",
            completion.text,
            metrics=StepMetrics.from_completion(completion),
            finish_reason=completion.finish_reason,
        )
        return AgentResult()
