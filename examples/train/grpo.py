"""On-policy GRPO on one machine: evsys rollouts from the local engine, a policy-gradient step, new weights.

    PYTHONPATH=src python examples/train/grpo.py --steps 40 --seed 0 --jobs-dir /tmp/grpo-jobs
    PYTHONPATH=src python examples/train/grpo.py --steps 40 --seeds 0,1,2 --jobs-dir /tmp/grpo-jobs

Each step: `run_rollouts` samples `group_size` answers per task from the running local engine and scores
them with the task's verifier; evsys computes the group-relative advantages (`mean_std`, the GRPO form). The
trainer's copy of the model recomputes the logprobs of the sampled tokens, weighs them by the advantage
through the clipped importance ratio against the logprobs recorded at sampling time, takes an AdamW step,
and loads its weights into the engine (`LocalPolicy.load_weights`), whose next batch is sampled with them.
A short self-contained loop (torch only), so every part of it can be read here.

A run is deterministic on CPU for its seed (`--seed`): the seed fixes torch's and Python's RNGs, and every
step's rollouts sample with a seed derived from it and the step (each sample of a group with its own,
`run_rollouts(seed=...)`); the engine generates one sequence at a time (`max_batch_size=1`: the rows a
sequence shares a batched forward pass with change its logits by float rounding, and which rows those are
depends on timing), and torch runs on one thread with deterministic algorithms. The same seed prints the same
table again. `--seeds 0,1,2` runs one loop per seed and prints the mean and spread of the reward per step.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import random
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evsys import run_rollouts
from evsys.model.local import LocalModelClient, LocalPolicy
from evsys.records import RolloutTrajectory, TrajectoryGroup
from evsys.task.python import VerifiedTask


@dataclass
class GRPOConfig:
    """Settings of the loop (defaults: the run reported in docs/training.md)."""

    group_size: int = 8
    learning_rate: float = 2e-3
    epochs: int = 2
    """Optimizer steps per batch of rollouts (after the first the importance ratio moves off 1)."""
    clip: float = 0.2
    max_grad_norm: float = 1.0
    max_tokens: int = 4
    temperature: float = 1.0
    n_concurrent: int = 16
    jobs_dir: Path = Path("jobs/grpo")
    seed: int = 0
    """Seeds torch and Python's RNGs and, with the step, every rollout's sampling (`step_seed`)."""


@dataclass
class StepReport:
    """What one step of the loop did and measured."""

    step: int
    sampled_with: int
    """Weights version that sampled this step's rollouts."""
    mean_reward: float
    loss: float
    """The GRPO loss of the update's last epoch (negative once the update has moved toward the advantages)."""
    max_logprob_gap: float
    """Largest |trainer logprob - recorded sampling logprob| before the update (sampler/trainer agreement)."""
    trained_rollouts: int
    new_version: int
    groups: list[TrajectoryGroup] = field(default_factory=list, repr=False)


def sequence_logprobs(model: Any, rollouts: list[RolloutTrajectory]) -> tuple[Any, Any]:
    """Teacher-forced logprob of every completion token of each rollout under `model`, padded to one
    [rollouts, longest completion] tensor, and the matching loss mask (0 on padding)."""
    import torch

    width = max(len(r.prompt_token_ids) + len(r.completion_token_ids) for r in rollouts)
    longest = max(len(r.completion_token_ids) for r in rollouts)
    ids = torch.zeros((len(rollouts), width), dtype=torch.long)
    attention = torch.zeros((len(rollouts), width), dtype=torch.long)
    for row, r in enumerate(rollouts):
        tokens = r.prompt_token_ids + r.completion_token_ids
        ids[row, : len(tokens)] = torch.tensor(tokens)
        attention[row, : len(tokens)] = 1
    logp = torch.log_softmax(model(input_ids=ids, attention_mask=attention).logits.float(), dim=-1)
    out = torch.zeros((len(rollouts), longest))
    mask = torch.zeros((len(rollouts), longest))
    for row, r in enumerate(rollouts):
        start, n = len(r.prompt_token_ids), len(r.completion_token_ids)
        positions = torch.arange(start - 1, start - 1 + n)
        out[row, :n] = logp[row, positions, torch.tensor(r.completion_token_ids)]
        mask[row, :n] = torch.tensor(r.loss_mask, dtype=torch.float)
    return out, mask


def grpo_loss(model: Any, rollouts: list[RolloutTrajectory], clip: float) -> tuple[Any, float]:
    """The clipped policy-gradient loss (mean over rollouts of the mean over their generated tokens) and the
    largest gap between the model's logprobs and the recorded sampling logprobs."""
    import torch

    new, mask = sequence_logprobs(model, rollouts)
    old = torch.zeros_like(new)
    for row, r in enumerate(rollouts):
        old[row, : len(r.logprobs)] = torch.tensor(r.logprobs)
    advantages = torch.tensor([r.advantage for r in rollouts]).unsqueeze(1)
    ratio = torch.exp(new - old)
    per_token = -torch.minimum(ratio * advantages, ratio.clamp(1 - clip, 1 + clip) * advantages)
    per_rollout = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)
    gap = float(((new.detach() - old).abs() * mask).max())
    return per_rollout.mean(), gap


def trainable(groups: list[TrajectoryGroup]) -> list[RolloutTrajectory]:
    """The rollouts that carry a learning signal: in their group's baseline (no error, or one the agent caused
    itself, a wrong answer; not screened for integrity findings), tokens recorded, a group whose rewards
    differ."""
    return [
        r
        for g in groups
        if not g.zero_variance
        for r in g.trajectories
        if r.in_baseline and r.completion_token_ids and len(r.logprobs) == len(r.completion_token_ids)
    ]


def step_seed(seed: int, step: int) -> int:
    """The sampling seed of step `step` of the run seeded `seed` (distinct per step and per run)."""
    return random.Random(f"grpo:{seed}:{step}").getrandbits(48)


class GRPOLoop:
    """The on-policy loop over one running local engine: `await loop.step()` runs one rollout batch and one
    update, and leaves the engine sampling with the new weights."""

    def __init__(
        self, client: LocalModelClient, policy: LocalPolicy, tasks: list[VerifiedTask], config: GRPOConfig
    ):
        import torch

        self.client, self.policy, self.tasks, self.config = client, policy, tasks, config
        random.seed(config.seed)
        torch.manual_seed(config.seed)
        self.model = policy.trainable_copy()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.learning_rate, weight_decay=0.0)
        self.steps = 0
        self.run_name = f"grpo-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"

    @classmethod
    async def create(cls, model_dir: Path, tasks: list[VerifiedTask], config: GRPOConfig) -> GRPOLoop:
        """A loop over the shared local engine for `model_dir` (the one `model="local:<dir>"` would use),
        generating one sequence at a time, so a seed gives the same run again (the module docstring)."""
        client = LocalModelClient(str(model_dir), max_batch_size=1)
        return cls(client, await client.policy(), tasks, config)

    async def rollouts(self) -> list[TrajectoryGroup]:
        """One batch: `group_size` samples of every task from the engine, scored, with GRPO advantages."""
        c = self.config
        return await run_rollouts(
            self.tasks,
            model=self.client,
            num_samples=c.group_size,
            max_tokens=c.max_tokens,
            temperature=c.temperature,
            n_concurrent=c.n_concurrent,
            jobs_dir=c.jobs_dir,
            job_name=f"{self.run_name}-step-{self.steps:04d}",
            advantage="mean_std",
            seed=step_seed(c.seed, self.steps),
        )

    def update(self, rollouts: list[RolloutTrajectory]) -> tuple[float, float]:
        """`epochs` AdamW steps on the GRPO loss; returns the last epoch's loss (the first one's is 0 up to
        rounding: the ratio is 1 and each group's advantages sum to 0) and the first epoch's logprob gap."""
        import torch

        loss_value, first_gap = 0.0, None
        for _ in range(self.config.epochs):
            loss, gap = grpo_loss(self.model, rollouts, self.config.clip)
            self.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
            self.optimizer.step()
            loss_value = float(loss.detach())
            first_gap = gap if first_gap is None else first_gap
        return loss_value, first_gap or 0.0

    async def step(self) -> StepReport:
        """Roll out, update the trainer's model, load its weights into the engine."""
        sampled_with = self.policy.weights_version
        groups = await self.rollouts()
        rewards = [r.reward for g in groups for r in g.trajectories]
        batch = trainable(groups)
        loss, gap = await asyncio.to_thread(self.update, batch) if batch else (0.0, 0.0)
        version = await self.policy.load_weights(self.model.state_dict()) if batch else sampled_with
        self.steps += 1
        return StepReport(
            step=self.steps,
            sampled_with=sampled_with,
            mean_reward=sum(rewards) / len(rewards),
            loss=loss,
            max_logprob_gap=gap,
            trained_rollouts=len(batch),
            new_version=version,
            groups=groups,
        )


DEFAULT_SEED = 0
"""The seed of the run docs/training.md shows (and tests/train checks rises)."""


@contextlib.contextmanager
def deterministic_torch() -> Iterator[None]:
    """torch on one thread with deterministic algorithms while the loop runs (the settings restored after)."""
    import torch

    threads, strict = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)  # also the fastest here: the engine and the trainer take turns
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(strict)


async def run(args: argparse.Namespace, seed: int, echo: bool) -> list[StepReport]:
    """`args.steps` steps of a loop seeded `seed` over a private copy of the starting policy (its own engine:
    each run starts from the same weights); prints one row per step when `echo`."""
    from digits import base_model_dir, sum_tasks

    config = GRPOConfig(group_size=args.group_size, learning_rate=args.lr, jobs_dir=args.jobs_dir, seed=seed)
    reports: list[StepReport] = []
    with tempfile.TemporaryDirectory(prefix="evsys-grpo-") as tmp, deterministic_torch():
        model_dir = Path(tmp) / "policy"
        shutil.copytree(base_model_dir(), model_dir)
        loop = await GRPOLoop.create(model_dir, sum_tasks(args.tasks), config)
        for _ in range(args.steps):
            report = await loop.step()
            reports.append(report)
            if echo:
                print(step_row(report), flush=True)
            if not math.isfinite(report.loss):
                raise SystemExit(f"seed {seed}, step {report.step}: the loss is {report.loss}")
    return reports


def step_row(report: StepReport) -> str:
    """One step as a row of the single-seed table."""
    return (
        f"| {report.step} | {report.sampled_with} | {report.mean_reward:.3f} | {report.loss:+.4f} "
        f"| {report.max_logprob_gap:.1e} | {report.trained_rollouts} |"
    )


def curve_rows(runs: dict[int, list[StepReport]]) -> list[str]:
    """The mean reward per step over the seeds' runs, its spread (population standard deviation) and range."""
    rows = [
        f"| step | mean reward ({len(runs)} seeds: {', '.join(map(str, runs))}) | std | min | max |",
        "|---:|---:|---:|---:|---:|",
    ]
    for step, reports in enumerate(zip(*runs.values(), strict=True), start=1):
        rewards = [r.mean_reward for r in reports]
        rows.append(
            f"| {step} | {statistics.fmean(rewards):.3f} | {statistics.pstdev(rewards):.3f} "
            f"| {min(rewards):.3f} | {max(rewards):.3f} |"
        )
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=GRPOConfig.group_size)
    parser.add_argument("--lr", type=float, default=GRPOConfig.learning_rate)
    parser.add_argument("--jobs-dir", type=Path, default=GRPOConfig.jobs_dir)
    seeds = parser.add_mutually_exclusive_group()
    seeds.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the run's seed (default: %(default)s)")
    seeds.add_argument(
        "--seeds", type=lambda text: [int(s) for s in text.split(",")], help="one run per seed, e.g. 0,1,2"
    )
    return parser.parse_args(argv)


async def main(argv: list[str] | None = None) -> dict[int, list[StepReport]]:
    """Run the loop from the command line: one row per step for `--seed`; for `--seeds`, the reward curve's
    mean and spread over the seeds (each run's wall time goes to stderr, so stdout repeats exactly)."""
    args = parse_args(argv)
    seeds = args.seeds or [args.seed]
    if not args.seeds:
        print("| step | weights version | mean reward | loss | max logprob gap | trained rollouts |")
        print("|---:|---:|---:|---:|---:|---:|", flush=True)
    runs = {}
    for seed in seeds:
        started = time.monotonic()
        runs[seed] = await run(args, seed, echo=not args.seeds)
        print(f"seed {seed}: {args.steps} steps in {time.monotonic() - started:.1f} s", file=sys.stderr)
    if args.seeds:
        print("\n".join(curve_rows(runs)), flush=True)
    return runs


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    asyncio.run(main())
