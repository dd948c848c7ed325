"""evsys's repository grading as it was before fresh-sandbox grading (test.sh and evsys_grade.py unchanged):
in the agent's sandbox, as root, restoring test files from the agent's HEAD, outcomes parsed from the log.
Kept for positive controls (every attack in test_repo_grading.py wins against it) and bench_repo.py."""

from __future__ import annotations

import shutil
from pathlib import Path

from evsys.repo.materialise import GRADING_KEY

HERE = Path(__file__).parent


def without_marker(task_dir: Path) -> Path:
    """`task_dir` without the fresh-sandbox marker: graded by its own tests/test.sh (as Harbor runs it)."""
    toml = task_dir / "task.toml"
    toml.write_text("".join(line for line in toml.read_text().splitlines(True) if GRADING_KEY not in line))
    return task_dir


def legacy_copy(task_dir: Path, out: Path) -> Path:
    """A copy of `task_dir` at `out` graded the old way."""
    shutil.copytree(task_dir, out)
    without_marker(out)
    for name in ("test.sh", "evsys_grade.py"):
        shutil.copyfile(HERE / name, out / "tests" / name)
    (out / "tests" / "test.sh").chmod(0o755)
    return out
