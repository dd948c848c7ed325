"""Shared pieces of the TRL tests: a small CPU GRPO configuration and weight snapshots."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

TASKS = Path(__file__).parent / "tasks"


def grpo_config(out: Path, **overrides: Any) -> Any:
    """GRPO on the CPU without vLLM: 4 rollouts per step (one group of 4), short completions, a large
    learning rate so a couple of steps visibly move the tiny model's weights."""
    from trl import GRPOConfig

    settings: dict[str, Any] = {
        "output_dir": str(out),
        "use_cpu": True,
        "use_vllm": False,
        "per_device_train_batch_size": 4,
        "num_generations": 4,
        "max_steps": 2,
        "max_completion_length": 48,
        "learning_rate": 5e-3,
        "temperature": 1.0,
        "logging_steps": 1,
        "report_to": [],
        "save_strategy": "no",
        "seed": 0,
        "bf16": False,
        "dataloader_num_workers": 0,
    }
    settings.update(overrides)
    return GRPOConfig(**settings)


def weights(model: Any) -> dict[str, Any]:
    """A copy of every parameter."""
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def changed(before: dict[str, Any], model: Any) -> list[str]:
    """The parameters that differ from `before`."""
    return [name for name, p in model.named_parameters() if not bool((p.detach() == before[name]).all())]


def recorded(job_dir: Path) -> list[Any]:
    """The job's trials (TrialResults) in the order their episodes started."""
    from evsys.records import TrialResult

    results = [TrialResult.model_validate_json(p.read_text()) for p in job_dir.glob("*/result.json")]
    return sorted(results, key=lambda r: int(r.trial_name.rsplit("__", 1)[1]))


def train_on_episodes(factory: Any, model_dir: Path, out: Path) -> tuple[Any, dict[str, Any]]:
    """Two GRPO steps (8 rollouts, one tool round each) of the tiny policy in `model_dir` on the factory's
    episodes; the trainer and the weights before training. The factory is closed afterwards."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from evsys.integrations.trl import hermes_response_parsing

    try:
        tokenizer = hermes_response_parsing(AutoTokenizer.from_pretrained(model_dir))
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        before = weights(model)
        trainer = GRPOTrainer(
            model=model,
            args=grpo_config(out, max_tool_calling_iterations=1),
            train_dataset=factory.dataset(repeats=8),
            processing_class=tokenizer,
            environment_factory=factory,
        )
        trainer.train()
    finally:
        factory.close()
    return trainer, before
