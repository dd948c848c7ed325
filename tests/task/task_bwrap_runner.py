"""Run a task's solution and tests the way a trial does, in a throwaway bubblewrap root (example tests).

The engine and its local sandbox have their own tests; this helper only lets the task tests check that each
bundled example's scripts are right (oracle → 1.0, nothing done → 0) independently of them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from evsys.task import Task

BWRAP = shutil.which("bwrap")


def _bwrap(root: Path, task: Task, binds: list[tuple[Path, str]], command: list[str]) -> None:
    args = [BWRAP, "--bind", str(root), "/", "--ro-bind", "/usr", "/usr"]
    for link in ("bin", "lib", "lib64", "sbin"):
        if Path(f"/usr/{link}").exists() and not (root / link).is_symlink():
            args += ["--symlink", f"usr/{link}", f"/{link}"]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--unshare-all", "--die-with-parent"]
    args += ["--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/tmp"]
    for key, value in task.environment.env.items():
        args += ["--setenv", key, value]
    for src, dst in binds:
        args += ["--ro-bind", str(src), dst]
    args += ["--chdir", task.environment.workdir, *command]
    done = subprocess.run(args, check=False, timeout=60, capture_output=True, text=True)
    if done.stderr.startswith("bwrap:"):
        raise RuntimeError(done.stderr)


def run_task(task: Task, root: Path, *, solve: bool) -> dict[str, float]:
    """Place the task's files under `root`, run solve.sh (if `solve`), then tests/test.sh; return rewards."""
    for copy in task.environment.files:
        target = root / copy.dst.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if copy.src.is_dir():
            shutil.copytree(copy.src, target, dirs_exist_ok=True)
        else:
            shutil.copy2(copy.src, target)
    (root / task.environment.workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (root / "logs" / "verifier").mkdir(parents=True, exist_ok=True)
    for mount in ("tests", "solution"):
        (root / mount).mkdir(exist_ok=True)
    if solve:
        _bwrap(root, task, [(task.solution_dir, "/solution")], ["bash", "/solution/solve.sh"])
    _bwrap(root, task, [(task.tests_dir, "/tests")], ["bash", "/tests/test.sh"])
    verifier = root / "logs" / "verifier"
    if (verifier / "reward.json").exists():
        return json.loads((verifier / "reward.json").read_text())
    return {"reward": float((verifier / "reward.txt").read_text())}
