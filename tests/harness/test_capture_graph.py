"""The capture graph of a harness run: the tiny harness retries a call and compacts its context in a real
trial (no-network sandbox, every call through the recording proxy to the tiny model); the trial's calls form
separate training sequences, each of which the local engine reproduces by teacher forcing."""

from __future__ import annotations

import json

from test_harness_agent import run_job

from evsys.records import Trajectory
from evsys.trajectory.export import export_job
from evsys.trajectory.graph import capture_graph


async def test_a_retried_and_compacted_run_yields_several_sequences(tmp_path, tiny_engine_client, tiny_agent):
    """Five calls: the first, its retry, a continuation, a compacted restart and its continuation. The graph
    has three sequences (the discarded first reply, the retry's conversation, the compacted one) with the
    retry and the compaction kept as breaks; every sequence's recorded logprobs match teacher forcing within
    1e-3, the non-model tokens are masked out, and both exports carry them."""
    agent = tiny_agent("tiny-retry-compact", "--no-tools", "--mode", "retry-compact")
    job, trial = await run_job(tmp_path, agent, tiny_engine_client)
    assert trial.failure is None, trial.failure
    trial_dir = job.store.trial_dir(trial.trial_name)
    trajectory = Trajectory.model_validate_json((trial_dir / "trajectory.json").read_bytes())
    graph = capture_graph(trajectory)

    assert len(graph.nodes) == 5
    assert [s.nodes for s in graph.sequences] == [[0], [1, 2], [3, 4]]
    assert [(b.node, b.kind) for b in graph.breaks] == [(1, "retry"), (3, "new_root")]
    assert graph.sequences[2].opened_by is not None and graph.sequences[2].opened_by.kind == "new_root"

    engine = await tiny_engine_client.engine()
    for seq in graph.sequences:
        assert len(seq.loss_mask) == len(seq.completion_token_ids) == len(seq.logprobs)
        rescored = engine.score(seq.prompt_token_ids, seq.completion_token_ids)
        learnt = [i for i, m in enumerate(seq.loss_mask) if m]
        assert learnt, f"sequence {seq.index} has no model tokens"
        worst = max(abs(rescored[i] - seq.logprobs[i]) for i in learnt)
        assert worst < 1e-3, f"sequence {seq.index} drifts from teacher forcing by {worst}"
    # the continuation's inserted user turn is context: model tokens are exactly the two completions
    second = graph.sequences[1]
    assert sum(second.loss_mask) == sum(len(graph.nodes[n].completion_token_ids) for n in second.nodes)

    (rows_file,) = export_job(job.store.job_dir, "sequences", tmp_path / "out")
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    assert [r["sequence"] for r in rows] == [0, 1, 2] and rows[1]["opened_by"]["kind"] == "retry"
    (traces_file,) = export_job(job.store.job_dir, "openenv", tmp_path / "out")
    (trace,) = [json.loads(line) for line in traces_file.read_text().splitlines()]
    assert trace["schema_version"] == 1 and len(trace["turns"]) == 5
    assert [t["metadata"]["parent_id"] for t in trace["turns"]] == [None, None, "call-1", None, "call-3"]
    for turn in trace["turns"]:
        prompt = len(turn["prompt_token_ids"])
        assert len(turn["loss_mask"]) == prompt + len(turn["completion_token_ids"])
        assert not any(turn["loss_mask"][:prompt]) and all(turn["loss_mask"][prompt:])
