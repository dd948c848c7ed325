"""The capture graph on a hand-made trajectory: a continued call, a retry that branches from the same parent
and is then continued, and a sub-agent with its own prompt — three paths, three training rows, breaks kept."""

from __future__ import annotations

from evsys.records import AgentInfo, StepMetrics, TrajectoryRecorder
from evsys.trajectory.graph import capture_graph


def trajectory(calls: list[tuple[list[int], list[int]]]):
    recorder = TrajectoryRecorder("t", AgentInfo(name="h"))
    recorder.add("user", "go")
    for index, (prompt, completion) in enumerate(calls):
        metrics = StepMetrics(
            prompt_token_ids=prompt,
            completion_token_ids=completion,
            logprobs=[-0.5] * len(completion),
            loss_mask=[1] * len(completion),
        )
        recorder.add("agent", "", metrics=metrics, proxy_call_index=index)
    return recorder.build()


def test_retries_and_sub_agents_become_separate_rows():
    graph = capture_graph(
        trajectory(
            [
                ([1, 2], [3]),  # A
                ([1, 2, 3, 4], [5]),  # B continues A
                ([1, 2, 3, 4], [6]),  # C: B retried (same prompt), a sibling of B
                ([9, 9], [8]),  # D: a sub-agent's own conversation
                ([1, 2, 3, 4, 6, 7], [0]),  # E continues the retry
            ]
        )
    )
    assert [n.parent for n in graph.nodes] == [None, 0, 0, None, 2]
    assert [(b.node, b.kind, b.closest_node) for b in graph.breaks] == [
        (2, "retry", 1),
        (3, "new_root", None),
    ]
    assert [s.nodes for s in graph.sequences] == [[0, 1], [3], [0, 2, 4]]
    first, sub, retried = graph.sequences
    assert (first.prompt_token_ids, first.completion_token_ids, first.loss_mask) == (
        [1, 2],
        [3, 4, 5],
        [1, 0, 1],
    )
    assert first.logprobs == [-0.5, 0.0, -0.5] and first.opened_by is None
    assert sub.opened_by is not None and sub.opened_by.kind == "new_root" and sub.call_indices == [3]
    # A's completion was learnt in the first row: context here (its logprob kept), like the inserted 7
    assert retried.completion_token_ids == [3, 4, 6, 7, 0] and retried.loss_mask == [0, 0, 1, 0, 1]
    assert retried.opened_by is not None and (retried.opened_by.kind, retried.opened_by.node) == ("retry", 2)


def test_steps_without_token_ids_are_not_calls():
    recorder = TrajectoryRecorder("t", AgentInfo(name="h"))
    recorder.add("agent", "no tokens", metrics=StepMetrics(prompt_tokens=3))
    assert capture_graph(recorder.build()).sequences == [] and capture_graph(None).nodes == []


def test_rows_carry_the_weights_version_of_each_call():
    """Calls sampled by versions 3, 3 and 4: each sequence row lists its calls' versions (and the one they
    share), each OpenEnv turn names its own, and the RL row's single version is null (mixed)."""
    from evsys.records import RolloutTrajectory, TrajectoryGroup
    from evsys.trajectory.export import rl_rows
    from evsys.trajectory.groups import sampling_version
    from evsys.trajectory.training_rows import openenv_traces, sequence_rows

    built = trajectory([([1, 2], [3]), ([1, 2, 3, 4], [5]), ([9], [8])])
    agent_steps = [s for s in built.steps if s.source == "agent"]
    for step, version in zip(agent_steps, (3, 3, 4), strict=True):
        assert step.metrics is not None
        step.metrics.weights_version = version
    sample = RolloutTrajectory(
        trial_name="t1", task_id="t", attempt=1, trajectory=built, weights_version=sampling_version(built)
    )
    groups = [TrajectoryGroup(group_id="job/t", task_id="t", trajectories=[sample])]
    rows = sequence_rows(groups)
    assert [(r["weights_versions"], r["weights_version"]) for r in rows] == [([3, 3], 3), ([4], 4)]
    [trace] = openenv_traces(groups)
    assert [t["metadata"]["weights_version"] for t in trace["turns"]] == [3, 3, 4]
    assert rl_rows(groups)[0]["weights_version"] is None


def test_openenv_turns_hold_the_reply_and_never_train_on_calls_without_logprobs():
    """Each turn's `response` is the call's assistant message; a call whose server returned no logprobs stays
    in the trace as context (completion mask 0, `logprobs_recorded` false) instead of claiming logprob 0."""
    from evsys.trajectory.training_rows import openenv_trace

    built = trajectory([([1, 2], [3]), ([1, 2, 3, 4], [5, 6])])
    unscored = [s for s in built.steps if s.source == "agent"][1]
    assert unscored.metrics is not None
    unscored.metrics.logprobs = None
    trace = openenv_trace(built, {"trial_name": "t1"})
    assert trace is not None
    scored, context = trace["turns"]
    assert scored["loss_mask"] == [0, 0, 1] and scored["metadata"]["logprobs_recorded"] is True
    assert context["loss_mask"] == [0, 0, 0, 0, 0, 0] and context["metadata"]["logprobs_recorded"] is False
    assert scored["response"] == {"choices": [{"message": {"role": "assistant", "content": ""}}]}
    assert context["metadata"]["trial_name"] == "t1" and openenv_trace(None, {}) is None
