"""The local engine shuts down in order: a process that exits mid-generation exits 0, not abort (rc 134)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SAFETY_TIMEOUT = 300  # seconds; only guards against a hung test

EXIT_WHILE_GENERATING = textwrap.dedent(
    """
    import asyncio, sys
    from evsys.model.base import SamplingParams
    from evsys.model.local.client import LocalModelClient

    async def main():
        client = LocalModelClient(sys.argv[1])
        engine = await client.engine()
        ids = engine.encode("hello " * 100)
        budget = engine.context_window - len(ids)
        client.shared.scheduler.submit(ids, SamplingParams(max_tokens=budget, ignore_eos=True))
        while client.shared.scheduler.steps < 3:  # generation is under way
            await asyncio.sleep(0.01)
        print("exiting mid-generation", flush=True)

    asyncio.run(main())
    """
)


def test_interpreter_exit_mid_generation_exits_zero(tiny_model_dir: Path):
    proc = subprocess.run(
        [sys.executable, "-c", EXIT_WHILE_GENERATING, str(tiny_model_dir)],
        capture_output=True,
        text=True,
        timeout=SAFETY_TIMEOUT,
    )
    assert "exiting mid-generation" in proc.stdout, proc.stderr
    assert "terminate called" not in proc.stderr
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_loop_job_whose_trials_time_out_mid_generation_exits_zero(tiny_model_dir: Path, tmp_path: Path):
    sys.path.insert(0, str(Path(__file__).parents[1] / "engine"))
    from engine_tasks import make_task

    dataset = tmp_path / "dataset"
    for i in range(3):
        make_task(dataset, f"slow-{i}", agent_timeout=0.5)
    env = {**os.environ, "EVSYS_SANDBOX_DIR": str(tmp_path / "scratch")}
    budget = json.loads((tiny_model_dir / "config.json").read_text())["max_position_embeddings"]
    # the loop agent's opening prompt (system, task, five tools) is ~800 of the tiny model's 1,024 tokens: a
    # fifth of the window fits beside it (half did not: the first call overflowed, and a trial could end
    # with `context_window` before its timeout), and generating it takes longer than the 0.5 s timeout
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "evsys.cli.main", "run", str(dataset)),
            *("-a", "loop", "-m", f"local:{tiny_model_dir}", "-n", "3"),
            *("--agent-kwarg", "max_turns=1000", "--agent-kwarg", f"max_tokens={budget // 5}"),
            *("--agent-timeout-multiplier", "0.25"),  # undoes the local engine's 4x: 0.5 s as the task says
            *("--jobs-dir", str(tmp_path / "jobs"), "--job-name", "timeouts"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=SAFETY_TIMEOUT,
    )
    assert "terminate called" not in proc.stderr
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = [json.loads(p.read_text()) for p in (tmp_path / "jobs" / "timeouts").glob("*/result.json")]
    assert len(results) == 3
    assert all(r["failure"]["cause"] == "agent_timeout" for r in results), results


def test_loading_and_generating_prints_no_transformers_noise(tiny_model_dir: Path):
    proc = subprocess.run(
        [sys.executable, "-c", EXIT_WHILE_GENERATING, str(tiny_model_dir)],
        capture_output=True,
        text=True,
        timeout=SAFETY_TIMEOUT,
        env={k: v for k, v in os.environ.items() if k != "TRANSFORMERS_VERBOSITY"},
    )
    assert "exiting mid-generation" in proc.stdout, proc.stderr
    assert "Loading weights" not in proc.stderr  # transformers' progress bar
    assert "deprecated" not in proc.stderr  # its notices about its own keyword arguments
