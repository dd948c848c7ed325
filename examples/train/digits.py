"""The task family of the GRPO example: one-digit sums, scored by a Python verifier function.

Every task asks "What is a+b?" with a + b <= 9; the `digit_sum` verifier gives 1.0 when the reply is exactly
the sum. The starting policy is the tiny Qwen2 model of `evsys.testing.tiny_model` (random weights), warmed
up by supervised steps to answer each task's question with one digit, fitted to a target that puts
(1 + WARMUP_EXTRA) / (10 + WARMUP_EXTRA) on the right digit and 1 / (10 + WARMUP_EXTRA) on each other one: it
knows the answer's form and leans weakly toward the right value. It starts right about one time in four
(docs/training.md); a group of eight samples usually holds right and wrong answers, and the reward has room
to rise to 1.0.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from evsys import VerifiedTask, verifier
from evsys.model.local.loader import cache_dir, load_model_and_tokenizer
from evsys.testing.tiny_model import TinyModelRecipe, build_tiny_model

VERIFIER = "digit_sum"
BASE_RECIPE = TinyModelRecipe(seed=11, context_window=256, train_steps=0)
"""The untrained tiny model (tokenizer and a seeded random init) the warm-up starts from."""
WARMUP_STEPS = 800
WARMUP_LR = 5e-3
WARMUP_EXTRA = 2
WARMUP_VERSION = 4
"""Bumped when the warm-up changes (it names the cached directory)."""


@verifier(VERIFIER, replace=True)
def digit_sum(completion: str, a: int, b: int) -> float:
    """1.0 when the reply is exactly the decimal sum of `a` and `b`, else 0.0."""
    return float(completion.strip() == str(a + b))


def sum_tasks(count: int = 16) -> list[VerifiedTask]:
    """The first `count` one-digit sums (a + b <= 9, in a fixed order) as verified Python tasks."""
    pairs = [(a, total - a) for total in range(10) for a in range(total + 1)]
    pairs = sorted(pairs, key=lambda p: ((p[0] * 7 + p[1] * 3) % 11, p))  # mixed sums, fixed order
    if not 1 <= count <= len(pairs):
        raise ValueError(f"count must be between 1 and {len(pairs)}, got {count}")
    return [
        VerifiedTask(id=f"sum-{a}-{b}", prompt=f"What is {a}+{b}?", verifier=VERIFIER, data={"a": a, "b": b})
        for a, b in pairs[:count]
    ]


def base_model_dir(root: Path | None = None) -> Path:
    """The warmed-up starting policy as a Hugging Face directory (built once, then reused from the cache)."""
    tiny = build_tiny_model(BASE_RECIPE)
    key = f"grpo-digits-{tiny.name}-w{WARMUP_STEPS}-v{WARMUP_VERSION}"
    target = (root or cache_dir() / "tiny-models") / key
    if (target / "evsys-warmup.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model, tokenizer = load_model_and_tokenizer(tiny)
        _warm_up(model, tokenizer, sum_tasks(16))
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "evsys-warmup.json").write_text(json.dumps({"from": str(tiny), "steps": WARMUP_STEPS}) + "\n")
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "evsys-warmup.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _warm_up(model: Any, tokenizer: Any, tasks: list[VerifiedTask]) -> None:
    """Teach the reply's form: after each prompt, a digit drawn from a target that gives every digit
    1 / (10 + extra) and the right one (1 + extra) / (10 + extra) (cross-entropy against that target),
    then the end-of-turn token."""
    import torch

    from evsys.model.local.engine import LocalEngine

    renderer = LocalEngine(model, tokenizer).renderer
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    digits = [renderer.encode(str(d)) for d in range(10)]
    assert all(len(ids) == 1 for ids in digits), "every digit is one token"
    digit_ids = torch.tensor([ids[0] for ids in digits])
    rows, targets = [], torch.full((len(tasks), 10), 1.0)
    for row, task in enumerate(tasks):
        answer = task.data["a"] + task.data["b"]
        prompt_ids = renderer.render([{"role": "user", "content": task.prompt}], None)
        rows.append(prompt_ids + digits[answer] + [eos])
        targets[row, answer] += WARMUP_EXTRA
    targets /= targets.sum(1, keepdim=True)
    assert len({len(row) for row in rows}) == 1, "every prompt has the same length"
    ids = torch.tensor(rows)
    torch.manual_seed(BASE_RECIPE.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=WARMUP_LR)
    model.train()
    for _ in range(WARMUP_STEPS):
        logp = torch.log_softmax(model(input_ids=ids).logits.float(), dim=-1)
        digit_loss = -(targets * logp[:, -3, digit_ids]).sum(1).mean()
        eos_loss = -logp[:, -2, eos].mean()
        optimizer.zero_grad()
        (digit_loss + eos_loss).backward()
        optimizer.step()
    model.eval()
