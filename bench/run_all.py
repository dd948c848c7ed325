"""Run every benchmark under bench/ (files named bench_*.py exposing `async def main() -> dict`).

Each benchmark prints its own table, with baselines measured in the same run; this runner saves every figure
to bench/last-run.json so bench/RESULTS.md can be updated from it.
Usage: `make bench` or `python bench/run_all.py [name ...]` (e.g. `sandbox engine`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import platform
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def _selected(names: list[str]) -> list[Path]:
    files = sorted(BENCH_DIR.glob("bench_*.py"))
    if not names:
        return files
    wanted = {f"bench_{n.removeprefix('bench_').removesuffix('.py')}" for n in names}
    unknown = wanted - {f.stem for f in files}
    if unknown:
        have = ", ".join(f.stem for f in files)
        sys.exit(f"unknown benchmark(s): {', '.join(sorted(unknown))}; have: {have}")
    return [f for f in files if f.stem in wanted]


async def _run(files: list[Path]) -> dict:
    results: dict = {}
    for path in files:
        print(f"\n=== {path.stem} ===", flush=True)
        started = time.perf_counter()
        try:
            results[path.stem] = await _load(path).main()
        except Exception as exc:  # one broken benchmark must not hide the others
            print(f"{path.stem} FAILED: {exc!r}", flush=True)
            results[path.stem] = {"error": repr(exc)}
        print(f"({path.stem}: {time.perf_counter() - started:.1f} s)", flush=True)
    return results


def main() -> None:
    """Run the selected benchmarks and save their figures."""
    files = _selected(sys.argv[1:])
    results = asyncio.run(_run(files))
    record = {"machine": platform.platform(), "python": platform.python_version(), "results": results}
    out = BENCH_DIR / "last-run.json"
    out.write_text(json.dumps(record, indent=2, default=str) + "\n")
    print(f"\nfigures saved to {out.relative_to(BENCH_DIR.parent)}")
    failed = [name for name, r in results.items() if isinstance(r, dict) and "error" in r]
    if failed:
        sys.exit(f"benchmarks failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
