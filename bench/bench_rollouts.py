"""Single-turn rollouts/s through `run_rollouts` with the tiny local model, and the engine's own overhead.

For each concurrency level (1, 8, 32) the same N greedy rollouts (3 arithmetic prompts, a registered verifier)
run twice in the same process with the same loaded model:
- baseline: the bare model calls, `client.complete(...)` for every prompt, at most c at a time;
- evsys: `run_rollouts(..., n_concurrent=c)` — planning, job/trial files written atomically, the verifier,
  reading trajectories back into groups, advantages.
Greedy decoding makes both produce the same tokens, so (evsys - baseline) / N is the engine's overhead per
rollout beyond model time. Target: <= 5 ms.

Usage: `python bench/bench_rollouts.py` or `python bench/run_all.py rollouts`.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

N_ROLLOUTS = 48
LEVELS = (1, 8, 32)
MAX_TOKENS = 8
TARGET_OVERHEAD_MS = 5.0
REPEATS = 3
QUESTIONS = {"What is 19+23?": "42", "What is 7*6?": "42", "What is 50-8?": "42"}


def _recipe():
    from evsys.testing.tiny_model import TinyModelRecipe, TrainingChat

    chats = [
        TrainingChat(messages=[{"role": "user", "content": q}, {"role": "assistant", "content": a}])
        for q, a in QUESTIONS.items()
    ]
    return TinyModelRecipe(chats=chats, train_steps=200, seed=3, context_window=4096)


def _items(n_samples: int):
    from evsys.task.python import VerifiedTask
    from evsys.verify.functions import register_verifier

    def exact(completion: str, answer: int) -> float:
        return float(completion.strip() == str(answer))

    register_verifier("bench-rollouts-exact", exact, replace=True)
    return [
        VerifiedTask(id=f"q{i}", prompt=q, verifier="bench-rollouts-exact", data={"answer": 42})
        for i, q in enumerate(QUESTIONS)
    ]


async def _baseline(client, prompts: list[str], concurrency: int) -> float:
    from evsys.model.base import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)
    gate = asyncio.Semaphore(concurrency)

    async def one(prompt: str) -> None:
        async with gate:
            await client.complete([{"role": "user", "content": prompt}], params=params)

    started = time.perf_counter()
    await asyncio.gather(*(one(p) for p in prompts))
    return time.perf_counter() - started


async def _evsys(client, items, samples: int, concurrency: int, jobs_dir: Path) -> float:
    from evsys.rollouts import run_rollouts

    started = time.perf_counter()
    groups = await run_rollouts(
        items,
        model=client,
        num_samples=samples,
        n_concurrent=concurrency,
        temperature=0.0,
        max_tokens=MAX_TOKENS,
        jobs_dir=jobs_dir,
        max_retries=0,
    )
    elapsed = time.perf_counter() - started
    errors = sum(g.n_errors for g in groups)
    if errors:
        raise RuntimeError(f"{errors} rollouts failed: {groups[0].errors_by_cause}")
    return elapsed


async def main() -> dict:
    """Run the benchmark; print and return rollouts/s and overhead per rollout at each concurrency."""
    from evsys.model.spec import create_model_client
    from evsys.testing.tiny_model import build_tiny_model

    model_dir = await asyncio.to_thread(build_tiny_model, _recipe())
    client = await asyncio.to_thread(create_model_client, f"local:{model_dir}")
    items = _items(N_ROLLOUTS)
    samples = N_ROLLOUTS // len(items)
    prompts = [item.prompt for item in items for _ in range(samples)]
    n = len(prompts)
    results: dict[str, dict] = {}
    try:
        await _baseline(client, prompts[:4], 4)  # warm-up
        with tempfile.TemporaryDirectory(prefix="evsys-bench-rollouts-") as tmp:
            for level in LEVELS:
                base, ours = float("inf"), float("inf")
                for _ in range(REPEATS):  # interleaved, best of each: the machine is shared and noisy
                    base = min(base, await _baseline(client, prompts, level))
                    ours = min(ours, await _evsys(client, items, samples, level, Path(tmp)))
                overhead_ms = (ours - base) / n * 1000
                results[f"n_concurrent_{level}"] = {
                    "rollouts": n,
                    "evsys_sec": round(ours, 3),
                    "baseline_sec": round(base, 3),
                    "rollouts_per_sec": round(n / ours, 1),
                    "ratio_vs_bare_model": round(ours / base, 3),
                    "overhead_ms_per_rollout": round(overhead_ms, 2),
                }
                print(
                    f"n_concurrent={level:>2}: {n / ours:7.1f} rollouts/s (bare model {n / base:7.1f}/s), "
                    f"ratio {ours / base:.2f}, overhead {overhead_ms:+.2f} ms/rollout "
                    f"(target <= {TARGET_OVERHEAD_MS:g} ms)"
                )
    finally:
        await client.aclose()
    return {"target_overhead_ms": TARGET_OVERHEAD_MS, **results}


if __name__ == "__main__":
    asyncio.run(main())
