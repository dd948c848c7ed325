"""Training rows from capture graphs: evsys's `sequences` rows and OpenEnv's `TrainingTrace` documents.

`sequence_rows` gives one row per training sequence of every sample (see evsys.trajectory.graph): the
sample's ids, reward and advantage, the sequence's tokens, mask and logprobs, which calls it holds (and the
policy weights version that sampled each) and the break that opened it. `openenv_traces` gives one OpenEnv
0.10 `TrainingTrace` per sample (`schema_version` 1, one turn per call with `node_id`, `prompt_token_ids`,
`completion_token_ids`, `per_token_logps` and a `loss_mask` over prompt + completion whose prompt part is 0);
the graph's links, the call's weights version, the sample's reward and the sequences a call belongs to travel
in each turn's `metadata`. Errored samples are exported like the others with their `error` set (nothing
disappears silently). Every row and every turn's `metadata` carries the sample's integrity findings
(`integrity`, `integrity_kinds`, `screened`; evsys.trajectory.groups.integrity_columns)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from evsys.records import RolloutTrajectory, Step, Trajectory, TrajectoryGroup
from evsys.trajectory.graph import CallNode, CaptureGraph, capture_graph
from evsys.trajectory.groups import integrity_columns

SEQUENCE_COLUMNS = (
    "group_id",
    "task_id",
    "trial_name",
    "attempt",
    "sequence",
    "step_ids",
    "call_indices",
    "prompt_token_ids",
    "completion_token_ids",
    "loss_mask",
    "logprobs",
    "opened_by",
    "weights_version",
    "weights_versions",
    "reward",
    "rewards",
    "advantage",
    "error",
    "integrity",
    "integrity_kinds",
    "screened",
)
OPENENV_SCHEMA_VERSION = 1


def _error(sample: RolloutTrajectory) -> str | None:
    return f"{sample.error.cause}: {sample.error.message}" if sample.error else None


def _shared(versions: list[int | None]) -> int | None:
    """The one weights version every call was sampled with, else None (unknown or mixed)."""
    return versions[0] if versions and len(set(versions)) == 1 else None


def sequence_rows(groups: Iterable[TrajectoryGroup]) -> list[dict[str, Any]]:
    """One row per training sequence of every sample, in group, sample and sequence order."""
    rows = []
    for group in groups:
        for sample in group.trajectories:
            graph = capture_graph(sample.trajectory)
            for seq in graph.sequences:
                versions = [graph.nodes[n].weights_version for n in seq.nodes]
                rows.append(
                    {
                        "group_id": group.group_id,
                        "task_id": sample.task_id,
                        "trial_name": sample.trial_name,
                        "attempt": sample.attempt,
                        "sequence": seq.index,
                        "step_ids": seq.step_ids,
                        "call_indices": seq.call_indices,
                        "prompt_token_ids": seq.prompt_token_ids,
                        "completion_token_ids": seq.completion_token_ids,
                        "loss_mask": seq.loss_mask,
                        "logprobs": seq.logprobs,
                        "opened_by": seq.opened_by.model_dump() if seq.opened_by else None,
                        "weights_version": _shared(versions),
                        "weights_versions": versions,
                        "reward": sample.reward,
                        "rewards": dict(sample.rewards),
                        "advantage": sample.advantage,
                        "error": _error(sample),
                        **integrity_columns(sample),
                    }
                )
    return rows


def _node_id(node: CallNode) -> str:
    return f"call-{node.node}"


def _response(step: Step) -> dict[str, Any]:
    """The call's reply as an OpenAI-shaped response: the assistant message with its tool calls."""
    message: dict[str, Any] = {"role": "assistant", "content": step.message}
    calls = [
        {
            "id": c.tool_call_id,
            "type": "function",
            "function": {"name": c.function_name, "arguments": c.arguments},
        }
        for c in step.tool_calls or []
    ]
    if calls:
        message["tool_calls"] = calls
    return {"choices": [{"message": message}]}


def _sampled(step: Step, node: CallNode) -> bool:
    """Whether the call's sampling logprobs were recorded, one per completion token."""
    logprobs = step.metrics.logprobs if step.metrics is not None else None
    return logprobs is not None and len(logprobs) == len(node.completion_token_ids)


def _turn(graph: CaptureGraph, node: CallNode, step: Step, metadata: dict[str, Any]) -> dict[str, Any]:
    """One OpenEnv `TrainingTurn`: a call with its mask over prompt + completion (prompt part 0). Each call is
    one turn, so its completion is learnt from once, whatever number of sequences pass through it; a call
    without recorded sampling logprobs stays as context (completion mask 0)."""
    sampled = _sampled(step, node)
    return {
        "node_id": _node_id(node),
        "prompt_token_ids": node.prompt_token_ids,
        "completion_token_ids": node.completion_token_ids,
        "per_token_logps": node.logprobs,
        "loss_mask": [0] * len(node.prompt_token_ids)
        + (node.loss_mask if sampled else [0] * len(node.loss_mask)),
        "request": {},
        "response": _response(step),
        "metadata": {
            "parent_id": _node_id(graph.nodes[node.parent]) if node.parent is not None else None,
            "step_id": node.step_id,
            "call_index": node.call_index,
            "weights_version": node.weights_version,
            "logprobs_recorded": sampled,
            "sequences": [s.index for s in graph.sequences if node.node in s.nodes],
            **metadata,
        },
    }


def openenv_trace(trajectory: Trajectory | None, metadata: dict[str, Any]) -> dict[str, Any] | None:
    """One OpenEnv `TrainingTrace` document of a trial's calls (None when it made none with token ids), with
    `metadata` added to every turn's."""
    graph = capture_graph(trajectory)
    if trajectory is None or not graph.nodes:
        return None
    steps = {step.step_id: step for step in trajectory.steps}
    turns = [_turn(graph, node, steps[node.step_id], metadata) for node in graph.nodes]
    return {"schema_version": OPENENV_SCHEMA_VERSION, "turns": turns}


def openenv_traces(groups: Iterable[TrajectoryGroup]) -> list[dict[str, Any]]:
    """One OpenEnv `TrainingTrace` per sample with at least one call (see the module docstring)."""
    traces = []
    for group in groups:
        for sample in group.trajectories:
            metadata = {
                "group_id": group.group_id,
                "task_id": sample.task_id,
                "trial_name": sample.trial_name,
                "attempt": sample.attempt,
                "reward": sample.reward,
                "rewards": dict(sample.rewards),
                "advantage": sample.advantage,
                "error": _error(sample),
                **integrity_columns(sample),
            }
            trace = openenv_trace(sample.trajectory, metadata)
            if trace is not None:
                traces.append(trace)
    return traces
