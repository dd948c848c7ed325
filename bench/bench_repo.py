"""Repository tasks: a trial's tree from the repo cache beside a fresh `git clone` of the same repository
(same run), host checkouts (`clone --shared`, `git worktree`) for comparison, 8 concurrent trees, 8
concurrent oracle trials on one repository end to end, and grading a row in a fresh sandbox beside the former
in-sandbox grading (`EVSYS_BENCH_ROWS=rows.jsonl`: its first row instead of the calc repository's).

The repository is generated (a few thousand Python files over some commits) so the figure does not depend
on the network; `EVSYS_BENCH_REPO=/path/to/repo` measures a real one instead (its HEAD is the commit).
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from evsys.agent.oracle import OracleAgent
from evsys.repo.cache import RepoCache, remove_checkout

TESTS_REPO = Path(__file__).resolve().parents[1] / "tests" / "repo"  # the calc repository the tests use
TESTS_SECURITY = TESTS_REPO.parent / "security"  # repo_legacy: the former in-sandbox grading
GRADING_ROUNDS = 7
WORK_SEC = 5.0  # WorkingOracle's "work" before the gold patch
ROUNDS = 7
SHAPES = (
    (400, 3000),
    (3000, 20),
)  # (files, commits): a typical pure-Python SWE repository; a wide, shallow one
CONCURRENT = 8
ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@b",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@b",
}


def _git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, text=True).stdout


def _module(i: int, version: int) -> bytes:
    body = "".join(f"def f{j}(x):\n    return x * {j} + {version}\n\n" for j in range(40))
    return f'"""Module {i}, version {version}."""\n\n{body}'.encode()


def make_repo(root: Path, files: int, commits: int) -> tuple[Path, str]:
    """A repository of `files` Python modules with `commits` commits of history (each rewrites a few
    modules), written with `git fast-import` so even a long history takes a second or two."""
    repo = root / f"repo-{files}-{commits}"
    repo.mkdir()
    _git("init", "-q", "-b", "main", cwd=repo)
    stream = bytearray()
    for c in range(commits):
        changed = range(files) if c == 0 else [(c * 7 + k * 13) % files for k in range(3)]
        message = f"commit {c}".encode()
        stream += b"commit refs/heads/main\n"
        stream += f"committer b <b@b> {1_600_000_000 + c * 60} +0000\n".encode()
        stream += f"data {len(message)}\n".encode() + message + b"\n"
        for i in changed:
            data = _module(i, c)
            stream += f"M 100644 inline pkg{i % 20}/mod{i}.py\ndata {len(data)}\n".encode() + data + b"\n"
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input=bytes(stream), check=True, env=ENV)
    _git("repack", "-adq", cwd=repo)
    return repo, _git("rev-parse", "main", cwd=repo).strip()


def _ms(fn, rounds: int = ROUNDS) -> list[float]:
    out = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


def measure_checkouts(repo: Path, commit: str, work: Path) -> dict:
    """Median ms of: cache checkout (create + remove), worktree add/remove, fresh clones."""
    work.mkdir(parents=True, exist_ok=True)
    cache = RepoCache(work / "cache")
    started = time.perf_counter()
    mirror = cache.ensure(str(repo), commit)
    first_mirror_ms = (time.perf_counter() - started) * 1000
    n = iter(range(10**6))

    def cached() -> None:
        dest = work / f"co-{next(n)}"
        cache.checkout(str(repo), commit, dest)
        remove_checkout(dest)

    def worktree() -> None:
        dest = work / f"wt-{next(n)}"
        _git("worktree", "add", "-q", "--detach", str(dest), commit, cwd=mirror)
        _git("worktree", "remove", "--force", str(dest), cwd=mirror)

    def clone(url: str) -> None:
        dest = work / f"cl-{next(n)}"
        _git("clone", "-q", url, str(dest))
        _git("checkout", "-q", "--detach", commit, cwd=dest)
        shutil.rmtree(dest)

    figures = {
        "trial_tree_from_cache_ms": _ms(lambda: cache.archive(str(repo), commit)),
        "cache_checkout_ms": _ms(cached),
        "worktree_ms": _ms(worktree),
        "fresh_clone_file_url_ms": _ms(lambda: clone(f"file://{repo}")),
        "fresh_clone_local_path_ms": _ms(lambda: clone(str(repo))),
    }
    result = {k: round(statistics.median(v), 1) for k, v in figures.items()}
    result["first_mirror_ms"] = round(first_mirror_ms, 1)
    for name, ours in (("trial_tree", "trial_tree_from_cache_ms"), ("checkout", "cache_checkout_ms")):
        for base in ("file_url", "local_path"):
            ratio = result[f"fresh_clone_{base}_ms"] / result[ours]
            result[f"speedup_{name}_vs_{base}_clone"] = round(ratio, 1)

    def one(i: int) -> float:
        started = time.perf_counter()
        cache.archive(str(repo), commit)
        return (time.perf_counter() - started) * 1000

    started = time.perf_counter()
    with ThreadPoolExecutor(CONCURRENT) as pool:
        each = list(pool.map(one, range(CONCURRENT)))
    result["concurrent_8_wall_ms"] = round((time.perf_counter() - started) * 1000, 1)
    result["concurrent_8_each_median_ms"] = round(statistics.median(each), 1)
    return result


async def measure_trials(work: Path) -> dict:
    """8 concurrent oracle trials of one instance (the image built before timing)."""
    sys.path.insert(0, str(TESTS_REPO))
    from calc_repo import calc_rows, make_calc_repo, write_rows

    from evsys.engine.config import AgentSpec, JobConfig
    from evsys.engine.job import Job

    rows = write_rows(work / "rows.jsonl", calc_rows(*make_calc_repo(work))[:1])

    async def job(name: str, attempts: int, concurrent: int):
        config = JobConfig(
            datasets=[rows],
            agents=[AgentSpec(name="oracle")],
            jobs_dir=work / "jobs",
            job_name=name,
            n_attempts=attempts,
            n_concurrent=concurrent,
        )
        started = time.perf_counter()
        result = await Job(config).run()
        return result, time.perf_counter() - started

    await job("warm", 1, 1)  # builds (or finds) the image
    one, one_s = await job("one", 1, 1)
    many, many_s = await job("eight", CONCURRENT, CONCURRENT)
    rewards = [t.reward for t in many.trials]
    placing = [t.timing.environment_build or 0.0 for t in many.trials]
    return {
        "one_trial_s": round(one_s, 2),
        "eight_concurrent_wall_s": round(many_s, 2),
        "eight_rewards": rewards,
        "eight_checkout_placement_median_ms": round(statistics.median(placing) * 1000, 1),
        "one_checkout_placement_ms": round((one.trials[0].timing.environment_build or 0.0) * 1000, 1),
    }


class WorkingOracle(OracleAgent):
    """The oracle after `WORK_SEC` seconds of work: what the grading sandbox's preparation overlaps with."""

    async def run(self, instruction, sandbox, ctx):
        """Wait, then apply the gold patch."""
        await asyncio.sleep(WORK_SEC)
        return await super().run(instruction, sandbox, ctx)


def _grading_row(work: Path) -> dict:
    """The row graded: the first of `EVSYS_BENCH_ROWS` (a rows file), else the calc repository's calc-neg."""
    if os.environ.get("EVSYS_BENCH_ROWS"):
        return json.loads(Path(os.environ["EVSYS_BENCH_ROWS"]).read_text().splitlines()[0])
    sys.path.insert(0, str(TESTS_REPO))
    from calc_repo import calc_rows, make_calc_repo

    return next(r for r in calc_rows(*make_calc_repo(work / "grading")) if r["instance_id"] == "calc-neg")


async def measure_grading(work: Path) -> dict:
    """One row graded in a fresh sandbox beside the former in-sandbox grading, `GRADING_ROUNDS` trials one at
    a time of the oracle (done at once: the grading sandbox's preparation cannot overlap) and of
    `WorkingOracle`; medians of the verifier phase and of the whole trial."""
    sys.path.insert(0, str(TESTS_SECURITY))
    from repo_legacy import legacy_copy

    from evsys.engine.config import AgentSpec, JobConfig
    from evsys.engine.job import Job
    from evsys.repo.materialise import write_task_dir
    from evsys.repo.rows import RepoTask

    row = _grading_row(work)
    fresh = write_task_dir(RepoTask.model_validate(row), work / "fresh" / row["instance_id"])
    dirs = {"in_sandbox": legacy_copy(fresh, work / "legacy" / row["instance_id"]), "fresh": fresh}

    async def trials(name: str, task_dir: Path, agent: str, attempts: int):
        config = JobConfig(
            datasets=[task_dir],
            agents=[AgentSpec(name=agent)],
            jobs_dir=work / "jobs",
            job_name=name,
            n_attempts=attempts,
            n_concurrent=1,
        )
        return (await Job(config).run()).trials

    for name, task_dir in dirs.items():
        await trials(f"warm-{name}", task_dir, "oracle", 1)  # builds (or finds) the image
    figures: dict = {"row": row["instance_id"]}
    for agent in ("oracle", "bench_repo:WorkingOracle"):
        short = agent.rsplit(":", 1)[-1]
        done: dict[str, list] = {name: [] for name in dirs}
        for n in range(GRADING_ROUNDS):  # interleaved: the machine's load drifts alike for both
            for name, task_dir in dirs.items():
                done[name] += await trials(f"{name}-{short}-{n}", task_dir, agent, 1)
        for name, ran in done.items():
            figures[f"{short}_{name}"] = {
                "rewards": sorted({t.reward for t in ran}),
                "verifier_ms": round(statistics.median((t.timing.verifier or 0.0) * 1000 for t in ran), 1),
                "trial_ms": round(statistics.median((t.timing.total or 0.0) * 1000 for t in ran), 1),
            }
        for key in ("verifier_ms", "trial_ms"):
            ratio = figures[f"{short}_fresh"][key] / figures[f"{short}_in_sandbox"][key]
            figures[f"{short}_ratio_{key.removesuffix('_ms')}"] = round(ratio, 2)
    return figures


def _print_grading(g: dict) -> None:
    print(f"grading one row ({g['row']}, {GRADING_ROUNDS} trials one at a time), medians:")
    for short, what in (("oracle", "oracle"), ("WorkingOracle", f"oracle after {WORK_SEC:g} s of work")):
        for name, label in (
            ("in_sandbox", "in the agent's sandbox (before)"),
            ("fresh", "in a fresh sandbox"),
        ):
            f = g[f"{short}_{name}"]
            print(
                f"  {what:<26} {label:<32} verifier {f['verifier_ms']:>8.1f} ms, "
                f"trial {f['trial_ms']:>8.1f} ms, rewards {f['rewards']}"
            )
        print(
            f"  {what:<26} fresh / in-sandbox: verifier {g[f'{short}_ratio_verifier']}x (target < 1.3x), "
            f"trial {g[f'{short}_ratio_trial']}x"
        )


def _print(files: int, commits: int, c: dict) -> None:
    print(f"repository: {files} files, {commits} commits")
    rows = [
        (
            "a trial's tree from the cache (git archive of the mirror, what trials use)",
            c["trial_tree_from_cache_ms"],
        ),
        ("host checkout from the cache (clone --shared + checkout + remove)", c["cache_checkout_ms"]),
        ("git worktree add + remove on the mirror", c["worktree_ms"]),
        ("fresh `git clone file://...` + checkout + remove (baseline)", c["fresh_clone_file_url_ms"]),
        ("fresh `git clone <path>` (hardlinked objects) + checkout + remove", c["fresh_clone_local_path_ms"]),
    ]
    for label, value in rows:
        print(f"  {label:<72} {value:>9.1f} ms")
    print(
        f"  speedup of the trial's tree vs file:// clone: {c['speedup_trial_tree_vs_file_url_clone']}x, "
        f"vs local-path clone: {c['speedup_trial_tree_vs_local_path_clone']}x; "
        f"host checkout vs file:// clone: {c['speedup_checkout_vs_file_url_clone']}x (target >= 10x)"
    )
    print(
        f"  {CONCURRENT} concurrent trial trees: wall {c['concurrent_8_wall_ms']} ms, "
        f"each median {c['concurrent_8_each_median_ms']} ms"
    )


async def main() -> dict:
    """Checkouts on each repository shape (or EVSYS_BENCH_REPO), then 8 concurrent trials; print tables."""
    result: dict = {}
    with tempfile.TemporaryDirectory(prefix="evsys-bench-repo-") as tmp:
        work = Path(tmp)
        if os.environ.get("EVSYS_BENCH_REPO"):
            repo = Path(os.environ["EVSYS_BENCH_REPO"])
            commit = _git("rev-parse", "HEAD", cwd=repo).strip()
            count = int(_git("rev-list", "--count", commit, cwd=repo).strip())
            shapes = [(repo, commit, count)]
        else:
            shapes = [(*make_repo(work, f, n), n) for f, n in SHAPES]
        for repo, commit, commits in shapes:
            files = len(_git("ls-tree", "-r", "--name-only", commit, cwd=repo).splitlines())
            figures = await asyncio.to_thread(measure_checkouts, repo, commit, work / repo.name)
            _print(files, commits, figures)
            result[f"{files}_files_{commits}_commits"] = figures
        trials = await measure_trials(work)
        grading = await measure_grading(work)
    print(f"{CONCURRENT} concurrent oracle trials on one repository: {json.dumps(trials)}")
    _print_grading(grading)
    result["trials"] = trials
    result["grading"] = grading
    return result


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main()), indent=2))
