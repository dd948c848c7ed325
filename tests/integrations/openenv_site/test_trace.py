"""One producer of OpenEnv training traces: the `TrainingTrace` an OpenEnv session returns is, turn for turn,
the document `evsys export --format openenv` writes for the same trial, validated by OpenEnv's own models."""

from __future__ import annotations

from openenv.core.harness import TrainingTrace

from evsys.integrations.openenv.trace import training_trace
from evsys.records import (
    AgentInfo,
    RolloutTrajectory,
    StepMetrics,
    ToolCall,
    TrajectoryGroup,
    TrajectoryRecorder,
)
from evsys.trajectory.training_rows import openenv_traces


def harness_run():
    """Three calls: a tool call, its continuation, and a call whose server returned no logprobs."""
    recorder = TrajectoryRecorder("t", AgentInfo(name="h"))
    recorder.add("user", "go")
    calls = [
        ([1, 2], [3, 4], [-0.5, -0.25]),
        ([1, 2, 3, 4, 5], [6], [-0.1]),
        ([1, 2, 3, 4, 5, 6, 7], [8], None),
    ]
    for index, (prompt, completion, logprobs) in enumerate(calls):
        metrics = StepMetrics(
            prompt_token_ids=prompt,
            completion_token_ids=completion,
            logprobs=logprobs,
            loss_mask=[1] * len(completion),
            weights_version=2,
        )
        tools = (
            [ToolCall(tool_call_id="c1", function_name="bash", arguments={"command": "ls"})]
            if index == 0
            else []
        )
        recorder.add("agent", f"reply {index}", tool_calls=tools, metrics=metrics, proxy_call_index=index)
    return recorder.build()


def test_the_session_trace_is_the_exported_document() -> None:
    trajectory = harness_run()
    trace = training_trace(trajectory, "trial-1")
    assert isinstance(trace, TrainingTrace)
    sample = RolloutTrajectory(trial_name="trial-1", task_id="t", attempt=1, trajectory=trajectory)
    [exported] = openenv_traces([TrajectoryGroup(group_id="j/t", task_id="t", trajectories=[sample])])
    exported_turns = TrainingTrace.model_validate(exported).turns
    assert len(exported_turns) == len(trace.turns) == 3
    for mine, theirs in zip(trace.turns, exported_turns, strict=True):
        assert mine.model_dump(exclude={"metadata"}) == theirs.model_dump(exclude={"metadata"})
        assert mine.metadata.items() <= theirs.metadata.items()  # the export adds the sample's ids and reward
    first, second, unscored = trace.turns
    assert [t.node_id for t in trace.turns] == ["call-0", "call-1", "call-2"]
    assert second.metadata["parent_id"] == "call-0" and first.metadata["weights_version"] == 2
    assert first.response["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "bash"
    assert first.loss_mask == [0, 0, 1, 1] and first.per_token_logps == [-0.5, -0.25]
    # no sampling logprobs: kept as context for the graph, never trained on
    assert unscored.loss_mask == [0] * 8 and unscored.metadata["logprobs_recorded"] is False
