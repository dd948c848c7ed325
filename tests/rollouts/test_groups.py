"""Flattening multi-turn trajectories into one prompt + completion sequence; group bookkeeping of errors."""

from __future__ import annotations

import pytest

from evsys.records import (
    AgentInfo,
    RolloutError,
    RolloutTrajectory,
    StepMetrics,
    TrajectoryGroup,
    TrajectoryRecorder,
)
from evsys.trajectory.groups import finalize_group, flatten_tokens


def _turn(recorder: TrajectoryRecorder, prompt: list[int], completion: list[int]) -> None:
    metrics = StepMetrics(
        prompt_token_ids=prompt,
        completion_token_ids=completion,
        logprobs=[-0.5] * len(completion),
        loss_mask=[1] * len(completion),
    )
    recorder.add("agent", "x", metrics=metrics)


def test_turns_that_extend_each_other_flatten_with_masked_context():
    recorder = TrajectoryRecorder("t", AgentInfo(name="loop"))
    recorder.add("user", "go")
    _turn(recorder, [1, 2], [3, 4])
    _turn(recorder, [1, 2, 3, 4, 9, 9], [5])
    seq = flatten_tokens(recorder.build())
    assert seq.prompt_token_ids == [1, 2]
    assert seq.completion_token_ids == [3, 4, 9, 9, 5]
    assert seq.loss_mask == [1, 1, 0, 0, 1]
    assert seq.logprobs == [-0.5, -0.5, 0.0, 0.0, -0.5]
    assert not seq.prefix_break


def test_a_prefix_break_stops_the_sequence_and_is_flagged():
    recorder = TrajectoryRecorder("t", AgentInfo(name="loop"))
    _turn(recorder, [1, 2], [3])
    _turn(recorder, [1, 7, 3], [4])
    seq = flatten_tokens(recorder.build())
    assert seq.prefix_break and seq.completion_token_ids == [3] and seq.loss_mask == [1]


def test_errored_samples_stay_counted_and_leave_the_baseline():
    samples = [
        RolloutTrajectory(trial_name="a", task_id="t", attempt=1, reward=1.0),
        RolloutTrajectory(trial_name="b", task_id="t", attempt=2, reward=0.0),
        RolloutTrajectory(
            trial_name="c", task_id="t", attempt=3, error=RolloutError(cause="model_error", message="down")
        ),
    ]
    group = finalize_group(TrajectoryGroup(group_id="j/t", task_id="t", trajectories=samples), "mean")
    assert group.advantages == pytest.approx([0.5, -0.5, 0.0])
    assert group.n_errors == 1 and group.errors_by_cause == {"model_error": 1}
    assert len(group.trajectories) == 3 and not group.zero_variance
