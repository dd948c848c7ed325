"""Local-engine speed (prefill and decode tokens/s, alone and batched, vs bare `model.generate`) and the loop
agent's own overhead per turn.

For the tiny fixture model and the default SmolLM2-135M-Instruct, in the same run:
- prefill tokens/s: evsys (a max_tokens=1 request) vs one bare forward pass over the same prompt;
- decode tokens/s: evsys (one request, EOS ignored) vs greedy `model.generate` for the same count;
- batched decode tokens/s: N concurrent evsys requests (continuous batching) vs the bare single-stream rate.
Usage: `python bench/bench_model.py` or `python bench/run_all.py model`.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

from evsys.model import SamplingParams
from evsys.model.local.client import LocalModelClient
from evsys.testing.tiny_model import DEMO_RECIPE, build_tiny_model

REPO_ROOT = Path(__file__).resolve().parents[1]
REPEATS = 3
WORDS = "the agent runs a command in the sandbox and reads the output before it writes the file "


async def _timed(fn: Any) -> float:
    started = time.perf_counter()
    await fn()
    return time.perf_counter() - started


def _bare_calls(engine: Any, prompt_ids: list[int], new_tokens: int) -> tuple[Any, Any]:
    """Bare-transformers baselines: one prefill forward, and a greedy model.generate of new_tokens tokens."""
    import torch

    ids = torch.tensor([prompt_ids])

    def forward() -> None:
        with torch.inference_mode():
            engine.model(input_ids=ids, logits_to_keep=1)

    def generate() -> None:
        with torch.inference_mode():
            engine.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=engine.tokenizer.pad_token_id or 0,
            )

    return forward, generate


async def _measure(
    label: str, client: LocalModelClient, prompt_words: int, new_tokens: int, batch: int
) -> dict:
    """Interleave evsys and bare runs (the machine is shared and noisy) and report medians."""
    engine = await client.engine()
    prompt_ids = engine.encode(WORDS * (prompt_words // 16 + 1))[:prompt_words]
    forward, generate = _bare_calls(engine, prompt_ids, new_tokens)
    one = SamplingParams(temperature=0, max_tokens=1)
    many = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True)
    await client.complete_ids(prompt_ids, one)  # warm-up
    await asyncio.to_thread(forward)
    rows: dict[str, list[float]] = {k: [] for k in ("bare_fwd", "bare_gen", "prefill", "total", "batched")}
    for _ in range(REPEATS):
        rows["bare_fwd"].append(await _timed(lambda: asyncio.to_thread(forward)))
        rows["prefill"].append(await _timed(lambda: client.complete_ids(prompt_ids, one)))
        rows["bare_gen"].append(await _timed(lambda: asyncio.to_thread(generate)))
        rows["total"].append(await _timed(lambda: client.complete_ids(prompt_ids, many)))
        rows["batched"].append(
            await _timed(
                lambda: asyncio.gather(*(client.complete_ids(prompt_ids, many) for _ in range(batch)))
            )
        )
    m = {k: statistics.median(v) for k, v in rows.items()}
    decode = (new_tokens - 1) / max(m["total"] - m["prefill"], 1e-9)
    bare_decode = (new_tokens - 1) / max(m["bare_gen"] - m["bare_fwd"], 1e-9)
    figures = {
        "prompt_tokens": len(prompt_ids),
        "new_tokens": new_tokens,
        "prefill_tok_s": round(len(prompt_ids) / m["prefill"], 1),
        "prefill_tok_s_bare": round(len(prompt_ids) / m["bare_fwd"], 1),
        "decode_tok_s": round(decode, 1),
        "decode_tok_s_bare_generate": round(bare_decode, 1),
        "batch": batch,
        "batched_tok_s": round(batch * new_tokens / m["batched"], 1),
        "request_s": round(m["total"], 3),
        "bare_generate_s": round(m["bare_gen"], 3),
    }
    figures["request_vs_bare_generate"] = round(m["bare_gen"] / m["total"], 2)
    figures["batched_vs_bare"] = round(figures["batched_tok_s"] / (new_tokens / m["bare_gen"]), 2)
    _print(label, figures)
    return figures


def _print(label: str, f: dict) -> None:
    print(f"{label}: prompt {f['prompt_tokens']} tokens, {f['new_tokens']} new tokens")
    bare = f["prefill_tok_s_bare"]
    print(f"  prefill   evsys {f['prefill_tok_s']:>9.1f} tok/s   bare forward   {bare:>9.1f} tok/s")
    bare = f["decode_tok_s_bare_generate"]
    print(f"  decode    evsys {f['decode_tok_s']:>9.1f} tok/s   bare generate  {bare:>9.1f} tok/s")
    print(
        f"  request   evsys {f['request_s']:>9.3f} s       bare generate  {f['bare_generate_s']:>9.3f} s"
        f"       speed ratio {f['request_vs_bare_generate']:.2f}"
    )
    print(
        f"  batched   evsys {f['batched_tok_s']:>9.1f} tok/s with {f['batch']} concurrent requests;"
        f" vs bare single stream {f['batched_vs_bare']:.2f}x",
        flush=True,
    )


async def _loop_overhead(runs: int = 10) -> dict:
    """The loop agent's own time per turn (not model, not sandbox), on create-file with the scripted model."""
    import sys

    from evsys.agent.base import AgentContext
    from evsys.agent.loop import LoopAgent
    from evsys.records import AgentInfo, SandboxSpec, TrajectoryRecorder
    from evsys.sandbox import LocalSandbox
    from evsys.task.loader import load_task

    root = REPO_ROOT
    sys.path.insert(0, str(root / "tests" / "agent"))
    from test_loop import CREATE_FILE, loop_recipe  # the scripted model that solves create-file

    client = LocalModelClient(str(build_tiny_model(loop_recipe())))
    task = load_task(CREATE_FILE)
    overheads, turns_total = [], 0
    async with LocalSandbox(SandboxSpec(name="bench-loop", workdir="/app")) as sandbox:
        await sandbox.exec("mkdir -p /app && chmod 777 /app", user="root")
        for i in range(runs + 1):
            recorder = TrajectoryRecorder(f"s{i}", AgentInfo(name="loop"))
            ctx = AgentContext(
                task=task, trial_name="b", logs_dir=root, trajectory=recorder, model_client=client
            )
            started = time.perf_counter()
            result = await LoopAgent(temperature=0).run(task.instruction, sandbox, ctx)
            wall = time.perf_counter() - started
            stats = result.metadata
            if i == 0:
                continue  # warm-up
            turns_total += stats["turns"]
            overheads.append((wall - stats["model_time_s"] - stats["tool_time_s"]) / stats["turns"])
    figures = {
        "runs": runs,
        "turns_per_run": turns_total / runs,
        "overhead_ms_per_turn_median": round(statistics.median(overheads) * 1000, 3),
        "target_ms": 2.0,
    }
    print(
        f"loop agent: {figures['overhead_ms_per_turn_median']:.3f} ms own overhead per turn "
        f"(median of {runs} runs, {figures['turns_per_run']:.0f} turns each; target < 2 ms)",
        flush=True,
    )
    return figures


async def main() -> dict:
    """Run both models and the loop-agent overhead measurement; return their figures."""
    tiny = LocalModelClient(str(build_tiny_model(DEMO_RECIPE)))
    results = {"loop_overhead": await _loop_overhead()}
    results["tiny"] = await _measure("tiny (Qwen2, hidden 64, 2 layers)", tiny, 256, 64, 32)
    smol = LocalModelClient("")
    results["smollm2"] = await _measure("SmolLM2-135M-Instruct (default local)", smol, 256, 32, 8)
    return results


if __name__ == "__main__":
    asyncio.run(main())
