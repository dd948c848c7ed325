"""Generate the arithmetic dataset of examples/math: seeded, so every run writes the same train.jsonl.

Usage: python examples/math/generate.py [--count 50] [--seed 1234] [--out examples/math/train.jsonl]

Each row: {"id": "math-007", "prompt": "What is 19+23? ...", "answer": 42}. The `answer` column becomes the
verifier's `answer` argument (extra columns go into the task's data); the verifier comes from dataset.toml.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
INSTRUCTION = "Answer with the number only."


def make_item(rng: random.Random, index: int) -> dict[str, object]:
    """One question: a sum, a difference or a small product, with its integer answer."""
    op = rng.choice(["+", "-", "*"])
    if op == "*":
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        answer = a * b
    else:
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        answer = a + b if op == "+" else a - b
    return {"id": f"math-{index:03d}", "prompt": f"What is {a}{op}{b}? {INSTRUCTION}", "answer": answer}


def generate(count: int, seed: int) -> list[dict[str, object]]:
    """`count` items from a generator seeded with `seed`."""
    rng = random.Random(seed)
    return [make_item(rng, i) for i in range(count)]


def main() -> None:
    """Write the dataset as JSON lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--out", type=Path, default=HERE / "train.jsonl")
    args = parser.parse_args()
    lines = "".join(json.dumps(item) + "\n" for item in generate(args.count, args.seed))
    args.out.write_text(lines, encoding="utf-8")
    print(f"wrote {args.count} items to {args.out}")


if __name__ == "__main__":
    main()
