"""examples/train/async_grpo.py: sampling overlaps training through `stream_rollouts`. Every trained sample
was drawn with weights at most `max_staleness` versions older than the trainer's at that update, names the
version the trainer set (`load_weights(..., version=update)`), and its recorded logprobs recompute within
1e-3 by teacher forcing under exactly that version's weights."""

from __future__ import annotations

import copy
import math
import shutil
from pathlib import Path
from typing import Any

from test_grpo_example import clone, worst_gap

from evsys.model.local.engine import LocalEngine


async def test_streamed_groups_train_within_the_staleness_bound(example, tmp_path: Path):
    import async_grpo
    import digits

    model_dir = tmp_path / "policy"  # a private copy: its own engine, untouched by other tests
    shutil.copytree(digits.base_model_dir(), model_dir)
    config = async_grpo.AsyncConfig(
        group_size=4, groups_per_update=2, max_staleness=1, n_concurrent=8, jobs_dir=tmp_path / "jobs"
    )
    loop = await async_grpo.AsyncGRPO.create(model_dir, config)
    weights: dict[int, dict[str, Any]] = {0: clone(loop.model.state_dict())}

    def snapshot(report: Any) -> None:
        weights[loop.version] = clone(loop.model.state_dict())

    reports = await loop.run(digits.sum_tasks(24), updates=4, on_update=snapshot)
    assert [r.update for r in reports] == [1, 2, 3, 4] and sorted(weights) == [0, 1, 2, 3, 4]
    assert all(math.isfinite(r.loss) for r in reports)

    policy = await loop.client.policy()
    scorers = {}
    for version, state in weights.items():
        model = copy.deepcopy(policy.model)
        model.load_state_dict(state)
        scorers[version] = LocalEngine(model, policy.tokenizer)
    trained = [(report, sample) for report in reports for sample in report.trained]
    assert trained, "no update had a group with a learning signal"
    for report, sample in trained:
        assert sample.weights_version is not None
        assert report.version_at_training - sample.weights_version <= config.max_staleness
        gap = worst_gap(scorers[sample.weights_version], sample)
        assert gap < 1e-3, f"{sample.trial_name} (version {sample.weights_version}): logprobs drift by {gap}"
    versions = {sample.weights_version for _, sample in trained}
    assert len(versions) > 1, f"every trained sample came from one version: {versions}"
