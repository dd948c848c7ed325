"""Per-step rollout metrics a trainer logs: reward mean/std per task, pass rate, errors by cause, integrity
findings, tokens, latencies and weights versions as one flat dict; the JSONL and TensorBoard loggers write
them."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from evsys.records import (
    FailureCause,
    IntegrityFinding,
    IntegrityKind,
    PhaseTimings,
    RolloutError,
    RolloutTrajectory,
    TrajectoryGroup,
    Usage,
)
from evsys.trajectory.groups import finalize_group
from evsys.trajectory.metrics import JsonlMetricsLogger, TensorBoardLogger, rollout_metrics


def _sample(task: str, attempt: int, reward: float, **extra) -> RolloutTrajectory:
    return RolloutTrajectory(
        trial_name=f"{task}__{attempt}",
        task_id=task,
        attempt=attempt,
        reward=reward,
        usage=Usage(prompt_tokens=10, completion_tokens=4 * attempt),
        timing=PhaseTimings(sandbox_start=0.1 * attempt, agent_run=1.0, verifier=0.5, total=2.0),
        weights_version=attempt,
        **extra,
    )


def _groups() -> list[TrajectoryGroup]:
    place = "/logs/verifier/reward.txt"
    finding = IntegrityFinding(kind=IntegrityKind.VERIFIER_PLACE_WRITTEN, evidence=place)
    error = RolloutError(cause=FailureCause.AGENT_TIMEOUT, message="timed out")
    a = TrajectoryGroup(
        group_id="j/a",
        task_id="a",
        trajectories=[_sample("a", 1, 1.0), _sample("a", 2, 0.0, integrity=[finding], zeroed=True)],
    )
    b = TrajectoryGroup(
        group_id="j/b", task_id="b", trajectories=[_sample("b", 1, 0.5), _sample("b", 2, 0.0, error=error)]
    )
    return [finalize_group(a), finalize_group(b)]


def test_one_step_of_groups_becomes_a_flat_dict_of_what_a_trainer_logs():
    metrics = rollout_metrics(_groups())
    assert metrics["evsys/reward/mean"] == pytest.approx(0.375)
    assert metrics["evsys/pass_rate"] == pytest.approx(0.25)
    assert metrics["evsys/task/a/reward_mean"] == pytest.approx(0.5)
    assert metrics["evsys/task/b/reward_std"] == pytest.approx(0.25)
    assert metrics["evsys/errors/total"] == 1 and metrics["evsys/errors/agent_timeout"] == 1
    assert metrics["evsys/integrity/samples_with_findings"] == 1
    assert metrics["evsys/integrity/verifier_place_written"] == 1 and metrics["evsys/integrity/zeroed"] == 1
    assert metrics["evsys/tokens/completion_total"] == 24 and metrics["evsys/tokens/prompt_mean"] == 10
    assert metrics["evsys/latency/sandbox_start_max"] == pytest.approx(0.2)
    assert metrics["evsys/latency/total_mean"] == pytest.approx(2.0)
    assert (metrics["evsys/weights_version/min"], metrics["evsys/weights_version/max"]) == (1, 2)
    assert all(isinstance(v, float) for v in metrics.values())


async def test_a_real_step_has_rewards_tokens_and_latencies(tmp_path, math_client, fresh_verifier, questions):
    from evsys.rollouts import run_rollouts
    from evsys.task.python import VerifiedTask

    name = fresh_verifier(lambda completion, answer: float(completion.strip() == str(answer)))
    items = [VerifiedTask(id="q0", prompt=questions[0], verifier=name, data={"answer": 42})]
    metrics = rollout_metrics(await run_rollouts(items, model=math_client, num_samples=2, jobs_dir=tmp_path))
    assert metrics["evsys/samples"] == 2 and metrics["evsys/tokens/completion_total"] > 0
    assert metrics["evsys/latency/total_mean"] > 0 and "evsys/latency/agent_run_max" in metrics


def _scalars(event_file: Path) -> dict[str, list[tuple[int, float]]]:
    """The scalars of a TensorBoard event file (TFRecord framing around `Event` protos)."""
    from tensorboardX.proto import event_pb2

    data, out, at = event_file.read_bytes(), {}, 0
    while at < len(data):
        (length,) = struct.unpack("<Q", data[at : at + 8])
        event = event_pb2.Event.FromString(data[at + 12 : at + 12 + length])
        at += 12 + length + 4
        for value in event.summary.value:
            out.setdefault(value.tag, []).append((event.step, value.simple_value))
    return out


def test_loggers_write_each_step(tmp_path: Path):
    metrics = rollout_metrics(_groups())
    jsonl = JsonlMetricsLogger(tmp_path / "metrics.jsonl")
    board = TensorBoardLogger(tmp_path / "tb")
    for step in (1, 2):
        jsonl.log(metrics, step)
        board.log(metrics, step)
    jsonl.close()
    board.close()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2] and lines[0]["evsys/pass_rate"] == 0.25
    [event_file] = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    scalars = _scalars(event_file)
    assert [step for step, _ in scalars["evsys/reward/mean"]] == [1, 2]
    assert scalars["evsys/reward/mean"][0][1] == pytest.approx(0.375)
