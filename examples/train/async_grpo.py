"""Asynchronous GRPO on one machine: sampling overlaps training through `stream_rollouts`.

    PYTHONPATH=src python examples/train/async_grpo.py --updates 8 --jobs-dir /tmp/async-grpo-jobs

The engine keeps sampling groups while the trainer updates: `stream_rollouts` yields each task's group as
soon as it is scored; every `--groups-per-update` groups the trainer takes one GRPO step (grpo.py's loss:
the clipped importance ratio against the logprobs recorded at sampling time, which is what makes training on
slightly stale samples sound) and loads its weights into the running engine as version `update`. Groups
sampled more than `--max-staleness` versions before the current one are dropped by the stream, so every
trained sample is at most that far off-policy. Each row printed: the update, the versions its samples were
drawn with, their mean reward, the loss.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evsys.model.local import LocalModelClient
from evsys.records import RolloutTrajectory, TrajectoryGroup
from evsys.streaming import RolloutStream, stream_rollouts
from evsys.task.python import VerifiedTask


@dataclass
class AsyncConfig:
    """Settings of the asynchronous loop."""

    group_size: int = 8
    groups_per_update: int = 2
    max_staleness: int = 1
    learning_rate: float = 2e-3
    clip: float = 0.2
    max_tokens: int = 4
    n_concurrent: int = 8
    jobs_dir: Path = Path("jobs/async-grpo")
    seed: int = 0


@dataclass
class UpdateReport:
    """One update: the versions its samples came from, what it trained on, the loss, the new version."""

    update: int
    sampled_with: list[int]
    mean_reward: float
    loss: float
    trained: list[RolloutTrajectory] = field(default_factory=list, repr=False)
    version_at_training: int = 0


class AsyncGRPO:
    """The loop: one trainable copy of the engine's model, updated from streamed groups."""

    def __init__(self, client: LocalModelClient, model: Any, config: AsyncConfig) -> None:
        import torch

        self.client, self.model, self.config = client, model, config
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.0)
        self.version = 0
        self.run_name = f"async-grpo-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"

    @classmethod
    async def create(cls, model_dir: Path, config: AsyncConfig) -> AsyncGRPO:
        """A loop over a local engine for `model_dir`."""
        import torch

        torch.manual_seed(config.seed)
        client = LocalModelClient(str(model_dir))
        policy = await client.policy()
        return cls(client, policy.trainable_copy(), config)

    async def stream(self, tasks: list[VerifiedTask]) -> RolloutStream:
        """Every task's group, streamed as it finishes."""
        c = self.config
        return await stream_rollouts(
            tasks,
            model=self.client,
            num_samples=c.group_size,
            max_tokens=c.max_tokens,
            temperature=1.0,
            n_concurrent=c.n_concurrent,
            jobs_dir=c.jobs_dir,
            job_name=self.run_name,
            advantage="mean_std",
            max_staleness=c.max_staleness,
        )

    async def update(self, groups: list[TrajectoryGroup]) -> UpdateReport:
        """One GRPO step on `groups`, then the new weights loaded into the engine as the next version."""
        from grpo import grpo_loss, trainable

        batch = trainable(groups)
        rewards = [r.reward for g in groups for r in g.trajectories]
        report = UpdateReport(
            update=self.version + 1,
            sampled_with=sorted(
                {r.weights_version for g in groups for r in g.trajectories if r.weights_version is not None}
            ),
            mean_reward=sum(rewards) / max(len(rewards), 1),
            loss=0.0,
            trained=batch,
            version_at_training=self.version,
        )
        if batch:
            report.loss = await asyncio.to_thread(self._step, grpo_loss, batch)
        self.version = await self.client.load_weights(self.model.state_dict(), version=self.version + 1)
        return report

    def _step(self, loss_fn: Any, batch: list[RolloutTrajectory]) -> float:
        import torch

        loss, _gap = loss_fn(self.model, batch, self.config.clip)
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        return float(loss.detach())

    async def run(self, tasks: list[VerifiedTask], updates: int, on_update: Any = None) -> list[UpdateReport]:
        """Stream groups and update every `groups_per_update` of them, up to `updates` updates."""
        stream = await self.stream(tasks)
        reports: list[UpdateReport] = []
        pending: list[TrajectoryGroup] = []
        async for group in stream:
            pending.append(group)
            if len(pending) == self.config.groups_per_update:
                report = await self.update(pending)
                reports.append(report)
                if on_update is not None:
                    on_update(report)
                pending = []
                if len(reports) == updates:
                    break
        return reports


async def main(argv: list[str] | None = None) -> list[UpdateReport]:
    """Run the loop from the command line and print one row per update."""
    import torch
    from digits import base_model_dir, sum_tasks

    torch.set_num_threads(1)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--updates", type=int, default=8)
    parser.add_argument("--max-staleness", type=int, default=AsyncConfig.max_staleness)
    parser.add_argument("--groups-per-update", type=int, default=AsyncConfig.groups_per_update)
    parser.add_argument("--jobs-dir", type=Path, default=AsyncConfig.jobs_dir)
    args = parser.parse_args(argv)
    config = AsyncConfig(
        max_staleness=args.max_staleness, groups_per_update=args.groups_per_update, jobs_dir=args.jobs_dir
    )
    loop = await AsyncGRPO.create(base_model_dir(), config)
    tasks = sum_tasks(args.updates * config.groups_per_update + 8)  # room for groups dropped as stale
    print("| update | sampled with versions | mean reward | loss |")
    print("|---:|---|---:|---:|")

    def show(report: UpdateReport) -> None:
        versions = ", ".join(map(str, report.sampled_with))
        print(f"| {report.update} | {versions} | {report.mean_reward:.3f} | {report.loss:+.4f} |", flush=True)

    return await loop.run(tasks, args.updates, show)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    asyncio.run(main())
