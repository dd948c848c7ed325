"""An evsys trajectory's model turns as OpenEnv's `TrainingTrace` (validated token capture for trainers).

Each agent step that recorded its token ids and sampling logprobs (the local engine, the recording proxy's
calls of a harness) is one `TrainingTurn`: the engine's own prompt ids, the sampled completion ids and their
logprobs, and a loss mask over prompt + completion — 0 on the prompt, the step's own mask (1 where none was
recorded) on the completion. Steps without token ids (a hosted model that returns none) are left out:
OpenEnv's contract forbids re-deriving them.
"""

from __future__ import annotations

from typing import Any

from openenv.core.harness import TrainingTrace, TrainingTurn

from evsys.records import Step, Trajectory


def _turn(step: Step, trial_name: str, metadata: dict[str, Any]) -> TrainingTurn | None:
    metrics = step.metrics
    if metrics is None or metrics.prompt_token_ids is None or metrics.completion_token_ids is None:
        return None
    if metrics.logprobs is None or len(metrics.logprobs) != len(metrics.completion_token_ids):
        return None
    completion = list(metrics.completion_token_ids)
    mask = list(metrics.loss_mask) if metrics.loss_mask is not None else [1] * len(completion)
    tool_calls = [
        {
            "id": c.tool_call_id,
            "type": "function",
            "function": {"name": c.function_name, "arguments": c.arguments},
        }
        for c in step.tool_calls or []
    ]
    message: dict[str, Any] = {"role": "assistant", "content": step.message}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return TrainingTurn(
        node_id=f"{trial_name}/step-{step.step_id}",
        prompt_token_ids=list(metrics.prompt_token_ids),
        completion_token_ids=completion,
        per_token_logps=[float(x) for x in metrics.logprobs],
        loss_mask=[0] * len(metrics.prompt_token_ids) + [int(m) for m in mask],
        response={"choices": [{"message": message}]},
        metadata={**metadata, "step_id": step.step_id},
    )


def training_trace(trajectory: Trajectory, trial_name: str, **metadata: Any) -> TrainingTrace:
    """The trajectory's agent turns that carry token ids and logprobs, in order, as a `TrainingTrace`."""
    turns = []
    for step in trajectory.steps:
        if step.source != "agent":
            continue
        turn = _turn(step, trial_name, {"trial_name": trial_name, **metadata})
        if turn is not None:
            turns.append(turn)
    return TrainingTrace(turns=turns)
