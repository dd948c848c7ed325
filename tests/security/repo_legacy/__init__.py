"""evsys's repository grading as it was before fresh-sandbox grading (test.sh and evsys_grade.py unchanged):
in the agent's sandbox, as root, restoring test files from the agent's HEAD, outcomes parsed from the log.
Kept for positive controls (every attack in test_repo_grading.py wins against it) and bench_repo.py.
runner_v1.py is evsys.repo.runner as it was before its pytest process was hardened."""

from __future__ import annotations

import shutil
from pathlib import Path

from evsys.repo.materialise import GRADING_KEY

HERE = Path(__file__).parent
# evsys.repo.runner before its pytest process was hardened (runner_child.py): the positive controls of the
# in-process attacks (repo_attacks.IN_PROCESS_ATTACKS) place it instead of today's
LEGACY_RUNNER = HERE / "runner_v1.py"


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
