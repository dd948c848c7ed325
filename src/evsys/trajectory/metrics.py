"""Per-step rollout metrics a trainer logs: `rollout_metrics(groups)` is a flat dict of numbers, and a
`MetricsLogger` writes such dicts step by step (`JsonlMetricsLogger`, `TensorBoardLogger`).

```python
groups = await run_rollouts(batch, model=client, num_samples=8)
metrics = rollout_metrics(groups)            # {"evsys/reward/mean": 0.42, "evsys/pass_rate": 0.25, ...}
logger.log(metrics, step)                    # or trainer.log(metrics) / wandb.log(metrics, step=step)
```

Keys (prefix `evsys/` by default):
- `reward/mean`, `reward/std` over every sample; `pass_rate`: the fraction of samples with reward >= 1;
  `task/<task_id>/reward_mean` and `task/<task_id>/reward_std` per group;
- `groups`, `samples`, `groups/zero_variance`: the fraction of groups whose rewards all tie (no signal);
- `errors/total` and `errors/<cause>` (failed samples by failure cause);
- `integrity/samples_with_findings`, `integrity/<kind>` (findings by kind), `integrity/screened`,
  `integrity/zeroed`;
- `tokens/prompt_mean`, `tokens/completion_mean`, `tokens/completion_total` (from each sample's usage);
- `latency/<phase>_mean` and `latency/<phase>_max` in seconds for `sandbox_start`, `agent_run`, `verifier`
  and `total` (each trial's phase timings);
- `weights_version/min`, `weights_version/max` over the samples that record one.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from evsys.records import RolloutTrajectory, TrajectoryGroup

LATENCY_PHASES = ("sandbox_start", "agent_run", "verifier", "total")
TENSORBOARD_HINT = "TensorBoard logging needs tensorboardX: pip install 'evsys[rl]'"


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _rewards(groups: Sequence[TrajectoryGroup], prefix: str) -> dict[str, float]:
    samples = [t for g in groups for t in g.trajectories]
    mean, std = _mean_std([t.reward for t in samples])
    out = {f"{prefix}reward/mean": mean, f"{prefix}reward/std": std, f"{prefix}samples": float(len(samples))}
    out[f"{prefix}pass_rate"] = sum(t.reward >= 1.0 for t in samples) / len(samples) if samples else 0.0
    out[f"{prefix}groups"] = float(len(groups))
    out[f"{prefix}groups/zero_variance"] = (
        sum(g.zero_variance for g in groups) / len(groups) if groups else 0.0
    )
    for group in groups:
        task_mean, task_std = _mean_std(group.rewards)
        out[f"{prefix}task/{group.task_id}/reward_mean"] = task_mean
        out[f"{prefix}task/{group.task_id}/reward_std"] = task_std
    return out


def _counts(samples: Sequence[RolloutTrajectory], prefix: str) -> dict[str, float]:
    causes = Counter(str(t.error.cause) for t in samples if t.error is not None)
    kinds = Counter(str(f.kind) for t in samples for f in t.integrity)
    out = {f"{prefix}errors/total": float(sum(causes.values()))}
    out |= {f"{prefix}errors/{cause}": float(n) for cause, n in sorted(causes.items())}
    out[f"{prefix}integrity/samples_with_findings"] = float(sum(bool(t.integrity) for t in samples))
    out[f"{prefix}integrity/screened"] = float(sum(t.screened for t in samples))
    out[f"{prefix}integrity/zeroed"] = float(sum(t.zeroed for t in samples))
    out |= {f"{prefix}integrity/{kind}": float(n) for kind, n in sorted(kinds.items())}
    return out


def _tokens_and_latency(samples: Sequence[RolloutTrajectory], prefix: str) -> dict[str, float]:
    n = max(len(samples), 1)
    out = {
        f"{prefix}tokens/prompt_mean": sum(t.usage.prompt_tokens for t in samples) / n,
        f"{prefix}tokens/completion_mean": sum(t.usage.completion_tokens for t in samples) / n,
        f"{prefix}tokens/completion_total": float(sum(t.usage.completion_tokens for t in samples)),
    }
    timings = [t.timing.model_dump() for t in samples if t.timing is not None]
    for phase in LATENCY_PHASES:
        seconds = [v for timing in timings if (v := timing[phase]) is not None]
        if seconds:
            out[f"{prefix}latency/{phase}_mean"] = sum(seconds) / len(seconds)
            out[f"{prefix}latency/{phase}_max"] = max(seconds)
    versions = [t.weights_version for t in samples if t.weights_version is not None]
    if versions:
        out[f"{prefix}weights_version/min"] = float(min(versions))
        out[f"{prefix}weights_version/max"] = float(max(versions))
    return out


def rollout_metrics(groups: Sequence[TrajectoryGroup], *, prefix: str = "evsys/") -> dict[str, float]:
    """One step's rollout metrics as a flat dict of floats (keys: the module docstring)."""
    samples = [t for g in groups for t in g.trajectories]
    return _rewards(groups, prefix) | _counts(samples, prefix) | _tokens_and_latency(samples, prefix)


class MetricsLogger(Protocol):
    """Anything that records a step's metrics (a trainer's `log`, `wandb.log` wrapped, the loggers below)."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Record `metrics` for `step`."""

    def close(self) -> None:
        """Flush and release what the logger holds."""


class JsonlMetricsLogger:
    """One JSON line per step (`{"step": N, "time": ..., **metrics}`), appended to `path` and flushed."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Append the step's line."""
        self._file.write(json.dumps({"step": step, "time": time.time(), **metrics}) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file."""
        self._file.close()


class TensorBoardLogger:
    """Scalars for TensorBoard (`tensorboard --logdir DIR`), written with tensorboardX (the `rl` extra)."""

    def __init__(self, log_dir: Path | str, writer_factory: Callable[[str], Any] | None = None) -> None:
        if writer_factory is None:
            try:
                from tensorboardX import SummaryWriter
            except ImportError as exc:
                raise ImportError(TENSORBOARD_HINT) from exc
            writer_factory = SummaryWriter
        self.writer = writer_factory(str(log_dir))

    def log(self, metrics: dict[str, float], step: int) -> None:
        """One scalar per key at `step`."""
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        """Close the event file."""
        self.writer.close()
