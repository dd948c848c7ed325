"""The cost of the hardened grading pytest (evsys.repo.runner_child: audit hook, signed report, canaries,
checks of pytest's machinery, the equality check) beside the runner before it (kept as
tests/security/repo_legacy/runner_v1.py), measured in the same run, interleaved:

- the runner alone on the calc repository's tree (no sandbox; the test suite's calc_repo.py), medians of 9;
- the verifier phase of the calc-neg row graded in a fresh sandbox (`EVSYS_BENCH_ROWS=rows.jsonl`: its first
  row instead), oracle trials one at a time, medians of 7.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evsys.repo import fresh as fresh_grading
from evsys.repo import runner

ROOT = Path(__file__).resolve().parents[1]
TESTS_REPO = ROOT / "tests" / "repo"
LEGACY_RUNNER = ROOT / "tests" / "security" / "repo_legacy" / "runner_v1.py"
RUNNER_ROUNDS = 9
TRIAL_ROUNDS = 7


def _calc_tree(root: Path) -> Path:
    """The calc repository's grading tree with the gold fix in (every test passes); its config."""
    sys.path.insert(0, str(TESTS_REPO))
    from calc_repo import calc_tree

    shutil.rmtree(root, ignore_errors=True)
    return calc_tree(root, "\n\ndef neg(a):\n    return -a\n")


def _runner_once(work: Path, legacy: bool) -> float:
    """One run of a runner on a fresh copy of the tree: ms."""
    config = _calc_tree(work / "tree")
    out = work / "tree" / "out"
    out.mkdir()
    started = time.perf_counter()
    if legacy:
        subprocess.run([sys.executable, str(LEGACY_RUNNER), str(config), str(out)], check=True)
    else:
        subprocess.run([sys.executable, str(Path(runner.__file__)), str(config), str(out)], check=True)
    elapsed = (time.perf_counter() - started) * 1000
    outcomes = json.loads((out / "outcomes.json").read_text())["outcomes"]
    assert set(outcomes.values()) == {"PASSED"}, outcomes
    return elapsed


def measure_runner(work: Path) -> dict:
    """Medians of the runner alone, before and after hardening, interleaved."""
    runs: dict[str, list[float]] = {"before": [], "hardened": []}
    for _ in range(RUNNER_ROUNDS):
        runs["before"].append(_runner_once(work, legacy=True))
        runs["hardened"].append(_runner_once(work, legacy=False))
    figures = {f"runner_{k}_ms": round(statistics.median(v), 1) for k, v in runs.items()}
    figures["runner_ratio"] = round(figures["runner_hardened_ms"] / figures["runner_before_ms"], 2)
    return figures


def _row(work: Path) -> dict:
    """The first row of `EVSYS_BENCH_ROWS`, else the calc repository's calc-neg."""
    if os.environ.get("EVSYS_BENCH_ROWS"):
        return json.loads(Path(os.environ["EVSYS_BENCH_ROWS"]).read_text().splitlines()[0])
    sys.path.insert(0, str(TESTS_REPO))
    from calc_repo import calc_rows, make_calc_repo

    return next(r for r in calc_rows(*make_calc_repo(work)) if r["instance_id"] == "calc-neg")


async def measure_verifier(work: Path) -> dict:
    """Medians of the verifier phase (and the trial) of oracle trials graded by each runner, interleaved."""
    from evsys.engine.config import AgentSpec, JobConfig
    from evsys.engine.job import Job
    from evsys.repo.materialise import write_task_dir
    from evsys.repo.rows import RepoTask

    row = await asyncio.to_thread(_row, work)
    task_dir = write_task_dir(RepoTask.model_validate(row), work / "rows" / row["instance_id"])

    async def trial(name: str, legacy: bool):
        config = JobConfig(
            datasets=[task_dir], agents=[AgentSpec(name="oracle")], jobs_dir=work / "jobs", job_name=name
        )
        hardened = fresh_grading.RUNNER
        fresh_grading.RUNNER = LEGACY_RUNNER if legacy else hardened
        try:
            return (await Job(config).run()).trials[0]
        finally:
            fresh_grading.RUNNER = hardened

    await trial("warm", legacy=False)  # builds (or finds) the image
    done: dict[str, list] = {"before": [], "hardened": []}
    for n in range(TRIAL_ROUNDS):
        for name in done:
            done[name].append(await trial(f"{name}-{n}", legacy=name == "before"))
    figures: dict = {"row": row["instance_id"]}
    for name, ran in done.items():
        figures[name] = {
            "rewards": sorted({t.reward for t in ran}),
            "verifier_ms": round(statistics.median((t.timing.verifier or 0.0) * 1000 for t in ran), 1),
            "trial_ms": round(statistics.median((t.timing.total or 0.0) * 1000 for t in ran), 1),
        }
    ratio = figures["hardened"]["verifier_ms"] / figures["before"]["verifier_ms"]
    figures["verifier_ratio"] = round(ratio, 2)
    return figures


async def main() -> dict:
    """Both figures; prints a table."""
    with tempfile.TemporaryDirectory(prefix="evsys-bench-hardening-") as tmp:
        work = Path(tmp)
        result = await asyncio.to_thread(measure_runner, work)
        result["verifier"] = await measure_verifier(work)
    v = result["verifier"]
    print(f"the runner alone on calc (3 tests), medians of {RUNNER_ROUNDS}:")
    print(f"  before hardening {result['runner_before_ms']:>8.1f} ms")
    print(f"  hardened         {result['runner_hardened_ms']:>8.1f} ms   ({result['runner_ratio']}x)")
    print(f"the verifier phase of {v['row']} (oracle, fresh sandbox), medians of {TRIAL_ROUNDS}:")
    for name in ("before", "hardened"):
        f = v[name]
        times = f"verifier {f['verifier_ms']:>8.1f} ms, trial {f['trial_ms']:>8.1f} ms"
        print(f"  {name:<9} {times}, rewards {f['rewards']}")
    print(f"  hardened / before: verifier {v['verifier_ratio']}x")
    return result


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main()), indent=2))
