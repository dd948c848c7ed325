"""`GRPOTrainer(rollout_func=...)` for which evsys owns the whole rollout loop (`run_rollouts`).

TRL calls `rollout_func(prompts, trainer)` with the batch's prompts — each repeated `num_generations` times
in a row — and expects one completion per prompt: `prompt_ids`, `completion_ids` and `logprobs`, plus any
extra field, which TRL hands to the reward functions (`env_mask` marks the completion tokens it trains on).

`EvsysRolloutFunc(tasks, model=...)` maps each prompt back to its evsys task (Python tasks, repository rows),
rolls each group out with `run_rollouts` (the loop agent, in a sandbox when the task wants one, against any
model evsys reaches: `local:<dir>`, an `evsys model serve` or vLLM URL, a model client object) and returns
evsys's recorded tokens: the first turn's prompt ids, every later turn's new context and completion as the
completion (`env_mask` 0 on tool output and other context), the sampling logprobs, the verifier's reward as
`evsys_reward` (score it with the `evsys_reward` reward function) and the trial's name as `evsys_trial`.
`integrity="zero" | "screen" | "flag"` goes to `run_rollouts`: a zeroed trial's `evsys_reward` is 0, a
screened one's None (TRL leaves it out of its group's baseline) with `env_mask` 0, so it is not trained on.
Every batch is an evsys job under `jobs_dir`, ready for `evsys view` and `evsys export`.

TRL trains its own copy of the weights; to keep sampling on-policy, `sync_weights(trainer)` runs before every
batch sampled after an optimiser step: load the trainer's weights into the serving engine there, or return
the model to sample from from then on (a model string such as `local:<dir the weights were saved to>`, or a
model client). evsys records the logprobs of the model's raw distribution (temperature 1), as TRL computes
them at its default `temperature=1.0`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evsys.engine.sources import resolve_tasks, tasks_on_disk
from evsys.records import RolloutTrajectory, TrajectoryGroup
from evsys.repo.rows import RepoTask
from evsys.rollouts import prepare_tasks, run_rollouts
from evsys.task.models import Task
from evsys.task.python import VerifiedTask
from evsys.trajectory.integrity import integrity_policy

TaskItem = VerifiedTask | RepoTask | Mapping[str, Any]
RolloutItem = VerifiedTask | RepoTask | Task


def evsys_reward(
    completions: list[Any], evsys_reward: list[float | None], **kwargs: Any
) -> list[float | None]:
    """TRL reward function: the verifier's reward evsys recorded for each completion (None: the trial
    failed, so TRL leaves it out of its group's baseline)."""
    return list(evsys_reward)


def _prompt_text(prompt: Any) -> str:
    """A TRL prompt as text: a standard prompt is the text; a conversational one, its last message's."""
    if isinstance(prompt, str):
        return prompt
    content = prompt[-1]["content"]
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    return str(content)


class EvsysRolloutFunc:
    """TRL's `rollout_func` over `run_rollouts`; `dataset()` gives the matching training dataset.

    `tasks` are what `evsys run` takes (evsys.engine.sources): a task directory or a directory of them, a
    dataset directory or rows file, `NAME@VERSION`, or Python tasks (`VerifiedTask`s or rows) or repository
    rows in memory; `options` go to `run_rollouts` (`model` is required; `max_turns`, `max_tokens`,
    `temperature`, `sandbox`, `agent`, `n_concurrent`, `jobs_dir`, ...). `sync_weights(trainer)` runs before
    each batch sampled after an optimiser step; what it returns, unless None, is the model sampled from then
    on.
    """

    def __init__(
        self,
        tasks: Sequence[TaskItem] | str | Path,
        *,
        sync_weights: Callable[[Any], Any] | None = None,
        **options: Any,
    ) -> None:
        if "model" not in options:
            raise ValueError("pass model=...: a model evsys can reach (e.g. 'local:/path/to/hf-dir')")
        integrity_policy(options.get("integrity", "zero"))  # a wrong value fails here, not mid-training
        self.options = options
        self.sync_weights = sync_weights
        self.items: dict[str, RolloutItem] = {}
        for item in _tasks(tasks):
            text = _prompt_of(item)
            if text in self.items:
                raise ValueError(
                    f"two tasks share the prompt {text[:60]!r}: the trainer cannot tell them apart"
                )
            self.items[text] = item
        self.synced_step = 0
        self.last_groups: list[TrajectoryGroup] = []

    def dataset(self, repeats: int = 1) -> Any:
        """A Hugging Face `Dataset` of the tasks' prompts (standard format, `repeats` times each)."""
        from datasets import Dataset

        return Dataset.from_list([{"prompt": text} for text in self.items] * repeats)

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """Roll out every group of identical prompts with evsys; one completion per prompt, in order."""
        step = int(trainer.state.global_step)
        if self.sync_weights is not None and step != self.synced_step:
            model = self.sync_weights(trainer)
            if model is not None:
                self.options["model"] = model
            self.synced_step = step
        keys = [_prompt_text(p) for p in prompts]
        unknown = sorted({k for k in keys if k not in self.items})
        if unknown:
            raise KeyError(f"prompts that are no task of this rollout function: {unknown[:3]}")
        runs = [(key, len(list(group))) for key, group in itertools.groupby(keys)]
        if len({count for _, count in runs}) != 1:
            raise ValueError(f"every prompt must come num_generations times in a row, got {runs}")
        groups = self._roll_out([key for key, _ in runs], runs[0][1])
        self.last_groups = groups
        return self._output(groups, trainer)

    def _roll_out(self, keys: list[str], samples: int) -> list[TrajectoryGroup]:
        """One group per key, in order; a task twice in the batch is rolled out in a later job of its own
        (a job's items are distinct)."""
        done: dict[int, TrajectoryGroup] = {}
        pending = list(range(len(keys)))
        while pending:
            batch: list[int] = []
            later: list[int] = []
            for index in pending:
                (later if any(keys[i] == keys[index] for i in batch) else batch).append(index)
            items = [self.items[keys[i]] for i in batch]
            on_disk = [item.path for item in items if isinstance(item, Task)]
            given: Any = on_disk if on_disk else items
            groups = asyncio.run(run_rollouts(given, num_samples=samples, **self.options))
            by_id = {group.task_id: group for group in groups}
            done.update((i, by_id[_id_of(self.items[keys[i]])]) for i in batch)
            pending = later
        return [done[i] for i in range(len(keys))]

    def _output(self, groups: list[TrajectoryGroup], trainer: Any) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {
            k: []
            for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "evsys_reward", "evsys_trial")
        }
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        for group in groups:
            for rollout in group.trajectories:
                _append(out, rollout, group.prompt, tokenizer)
        return out


def _prompt_of(item: RolloutItem) -> str:
    if isinstance(item, RepoTask):
        return item.problem_statement
    return item.instruction if isinstance(item, Task) else item.prompt


def _id_of(item: RolloutItem) -> str:
    """The `task_id` of the item's group in `run_rollouts`' output."""
    if isinstance(item, RepoTask):
        return item.instance_id
    return item.name if isinstance(item, Task) else item.id


def _tasks(tasks: Sequence[TaskItem] | str | Path) -> list[RolloutItem]:
    """Tasks on disk as loaded for a job; else the Python tasks, validated as `run_rollouts` does (each with a
    verifier), then the repository rows."""
    source = asyncio.run(resolve_tasks(tasks))
    if source.paths:
        return list(tasks_on_disk(source.paths))
    rows = list(source.rows)
    python = source.memory
    verified: list[RolloutItem] = []
    for task in prepare_tasks(python, outcome_reward=True, sandbox=None) if python else []:
        if not isinstance(task, VerifiedTask):
            raise ValueError(f"task {task.id!r} has no verifier: nothing to train on")
        verified.append(task)
    return [*verified, *rows]


def _append(out: dict[str, list[Any]], rollout: RolloutTrajectory, prompt: str, tokenizer: Any) -> None:
    """One rollout's fields. A rollout outside its group's baseline (its trial failed with an error, or was
    screened for integrity findings) or without tokens becomes one untrained EOS token; its reward is None
    outside the baseline (TRL leaves it out), else its reward (a failure the agent caused itself is a 0)."""
    if rollout.in_baseline and rollout.completion_token_ids:
        out["prompt_ids"].append(list(rollout.prompt_token_ids))
        out["completion_ids"].append(list(rollout.completion_token_ids))
        out["logprobs"].append(list(rollout.logprobs))
        out["env_mask"].append(list(rollout.loss_mask))
    else:
        out["prompt_ids"].append(list(rollout.prompt_token_ids) or tokenizer.encode(prompt))
        out["completion_ids"].append([tokenizer.eos_token_id])
        out["logprobs"].append([0.0])
        out["env_mask"].append([0])
    out["evsys_reward"].append(rollout.reward if rollout.in_baseline else None)
    out["evsys_trial"].append(rollout.trial_name)
