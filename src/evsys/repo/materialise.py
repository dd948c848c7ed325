"""A `RepoTask` as a Harbor task directory: what `evsys run rows.jsonl` runs and `evsys tasks export` writes.

    <instance_id>/task.toml            workdir /testbed; docker_image when the row names one
                  instruction.md       the problem statement
                  environment/Dockerfile   python:<X>-slim + git + the row's pip packages (no row image)
                  solution/solve.sh + patch.diff   the gold patch (the oracle applies it)
                  tests/test.patch, config.json, evsys_runner[_child].py, evsys_grade.py   grading's inputs
                  tests/test.sh (+ base/ when exported)   the grading in Harbor's one-container model

The gold patch and the test patch live in `solution/` and `tests/`, which reach a sandbox only for the
oracle and for grading, never while the agent runs. evsys grades every such directory in a fresh sandbox
(`[metadata] evsys_repo_grading`, evsys.repo.fresh); Harbor ignores that key and runs tests/test.sh. For
`evsys run`, evsys places the repository at trial start from the repo cache (`[metadata.evsys_repo]` names
source, commit and install commands); an exported directory instead carries the tree (`environment/repo/`) and
its Dockerfile copies it to /testbed and runs the install commands, so it runs anywhere Harbor's task format
does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

from evsys.repo.cache import RepoCache
from evsys.repo.fresh import RUNNER_HELPERS, patch_paths, row_test_files
from evsys.repo.rows import RepoTask
from evsys.repo.workspace import METADATA_KEY

GRADER = Path(__file__).with_name("grade.py")
RUNNER = Path(__file__).with_name("runner.py")
GRADING_KEY = "evsys_repo_grading"  # task.toml's [metadata]: evsys grades the row in a fresh sandbox
FRESH_SANDBOX = "fresh-sandbox"

# An exported directory's verification, in Harbor's one-container model (docs/repo-tasks.md says what it can
# and cannot protect against): the touched files are restored from the base copies shipped in tests/base/,
# the test patch applied with a throwaway git (the tree's own .git, its config, hooks and filters, is never
# read), the tests run by evsys_runner.py (as `nobody` when there is one; outcomes from its report, never
# from the log) and scored by evsys_grade.py.
_TEST_SH = """#!/bin/bash
cd {workdir} || exit 1
OUT=/logs/verifier
mkdir -p "$OUT"
PY=$(command -v python3 || command -v python)
G=$(mktemp -d)
git init -q --bare "$G/git"
GIT="git --git-dir=$G/git --work-tree={workdir} -c core.hooksPath=/dev/null"
for f in $(sed -n 's|^diff --git a/\\(.*\\) b/\\(.*\\)$|\\1 \\2|p' /tests/test.patch); do
  rm -rf -- "$f"
  if [ -f "/tests/base/$f" ]; then mkdir -p -- "$(dirname -- "$f")" && cp -p -- "/tests/base/$f" "$f"; fi
done
if [ -s /tests/test.patch ] && ! $GIT apply --verbose /tests/test.patch > "$OUT/test_patch.log" 2>&1; then
  "$PY" /tests/evsys_grade.py /tests/config.json "$OUT" --cause \\
    "the test patch does not apply: $(grep -E '^error:' "$OUT/test_patch.log" | tail -n 2 | tr '\\n' ' ')"
  exit 0
fi
USER_ARG=$(id -u nobody > /dev/null 2>&1 && echo "--user nobody")
"$PY" -I /tests/evsys_runner.py /tests/config.json "$OUT" $USER_ARG
exec "$PY" /tests/evsys_grade.py /tests/config.json "$OUT"
"""

# The oracle's patch, applied by root in the (trusted) oracle's tree
_GIT = "git -c safe.directory={workdir} -c core.hooksPath=/dev/null"

_SOLVE_SH = """#!/bin/bash
set -e
cd {workdir}
if [ -s /solution/patch.diff ]; then {git} apply --verbose /solution/patch.diff; fi
"""


def dockerfile(task: RepoTask, *, with_repo: bool) -> str | None:
    """The environment's Dockerfile: None when the row names its own image (and nothing is added to it)."""
    if task.image_name:
        return None
    lines = [
        f"FROM python:{task.python}-slim",
        "RUN apt-get update && apt-get install -y --no-install-recommends git patch "
        "&& rm -rf /var/lib/apt/lists/*",
    ]
    if task.packages:
        lines.append("RUN pip install --no-cache-dir " + shlex.join(task.packages))
    if with_repo:
        lines += [
            f"COPY repo/ {task.workdir}/",
            f"RUN cd {task.workdir} && git init -q && git add -A && git -c user.name=evsys "
            "-c user.email=evsys@localhost commit -q --no-verify -m base",
            *(f"RUN cd {task.workdir} && {command}" for command in task.install),
        ]
    lines.append(f"WORKDIR {task.workdir}")
    return "\n".join(lines) + "\n"


def task_toml(task: RepoTask, *, with_repo: bool) -> str:
    """task.toml: identity, timeouts, workdir, image, and (for evsys runs) where the repository comes from."""
    data: dict = {
        "task": {"name": task.instance_id},
        "metadata": {
            "repo": task.repo,
            "base_commit": task.base_commit,
            "FAIL_TO_PASS": task.FAIL_TO_PASS,
            "PASS_TO_PASS": task.PASS_TO_PASS,
        },
        "agent": {"timeout_sec": 1800.0, "network_mode": task.agent_network},
        "verifier": {"timeout_sec": 1800.0},  # the environment's network: the sandbox starts with it
        "environment": {"build_timeout_sec": 1800.0, "workdir": task.workdir},
    }
    if task.version:
        data["metadata"]["version"] = task.version
    data["metadata"][GRADING_KEY] = FRESH_SANDBOX  # evsys's grading; Harbor ignores it and runs tests/test.sh
    if task.image_name:
        data["environment"]["docker_image"] = task.image_name
    elif not with_repo:
        data["metadata"][METADATA_KEY] = {
            "source": task.source,
            "commit": task.base_commit,
            "workdir": task.workdir,
            "install": task.install,
        }
    return _toml(data)


def _toml(data: dict, prefix: str = "") -> str:
    """TOML for nested tables of strings, numbers and lists of strings (JSON strings are TOML strings)."""
    scalars = [f"{k} = {json.dumps(v)}" for k, v in data.items() if not isinstance(v, dict)]
    text = (f"[{prefix}]\n" if prefix and scalars else "") + "".join(line + "\n" for line in scalars)
    for key, value in data.items():
        if isinstance(value, dict):
            text += "\n" + _toml(value, f"{prefix}.{key}" if prefix else key)
    return text


def instruction(task: RepoTask) -> str:
    """What the agent is told: the problem statement and where the repository is."""
    return (
        f"{task.problem_statement.rstrip()}\n\n---\nThe repository ({task.repo}) is checked out at "
        f"{task.workdir}. Change its source so the issue above is resolved; do not modify its tests.\n"
    )


def test_config(task: RepoTask) -> dict:
    """tests/config.json, read by evsys_grade.py in the sandbox."""
    return {
        "instance_id": task.instance_id,
        "test_cmd": task.test_cmd,
        "fail_to_pass": task.FAIL_TO_PASS,
        "pass_to_pass": task.PASS_TO_PASS,
        "chunk_size": task.test_chunk_size,
        "root": task.workdir,
        "test_files": row_test_files(task.test_patch, task.FAIL_TO_PASS + task.PASS_TO_PASS),
    }


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)


def _write_tree(task: RepoTask, out: Path, cache: RepoCache, with_repo: bool) -> None:
    _write(out / "task.toml", task_toml(task, with_repo=with_repo))
    _write(out / "instruction.md", instruction(task))
    docker = dockerfile(task, with_repo=with_repo)
    if docker is not None:
        _write(out / "environment" / "Dockerfile", docker)
    if with_repo and not task.image_name:
        data = cache.archive(task.source, task.base_commit)
        with tarfile.open(fileobj=BytesIO(data)) as tar:
            tar.extractall(out / "environment" / "repo", filter="data")
    git = _GIT.format(workdir=task.workdir)
    _write(out / "solution" / "solve.sh", _SOLVE_SH.format(workdir=task.workdir, git=git), 0o755)
    _write(out / "solution" / "patch.diff", task.patch)
    _write(out / "tests" / "test.sh", _TEST_SH.format(workdir=task.workdir), 0o755)
    _write(out / "tests" / "test.patch", task.test_patch)
    _write(out / "tests" / "config.json", json.dumps(test_config(task), indent=2) + "\n")
    shutil.copyfile(GRADER, out / "tests" / "evsys_grade.py")
    shutil.copyfile(RUNNER, out / "tests" / "evsys_runner.py")
    for helper in RUNNER_HELPERS:
        shutil.copyfile(helper, out / "tests" / f"evsys_{helper.name}")
    if with_repo:
        _write_base_files(task, out / "tests" / "base", cache)


def _write_base_files(task: RepoTask, out: Path, cache: RepoCache) -> None:
    """The base versions of the files the test patch touches (what an exported test.sh restores)."""
    touched = set(patch_paths(task.test_patch))
    data = cache.archive(task.source, task.base_commit)
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and m.name in touched]
        tar.extractall(out, members=members, filter="data")


def write_task_dir(
    task: RepoTask,
    out: Path,
    *,
    with_repo: bool = False,
    cache: RepoCache | None = None,
    keep_existing: bool = False,
) -> Path:
    """Write `task` as a task directory at `out`: built beside it, then renamed into place (an existing one is
    replaced, or with `keep_existing` left as it is). `with_repo=True` (export) puts the repository tree into
    the environment for runners other than evsys."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        _write_tree(task, tmp, cache or RepoCache(), with_repo)
        if out.exists() and not keep_existing:
            shutil.rmtree(out)
        try:
            os.rename(tmp, out)
        except OSError:  # `out` appeared meanwhile (another process wrote it)
            if not keep_existing or not (out / "task.toml").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def materialised_dir(task: RepoTask, root: Path) -> Path:
    """The task directory of `task` under `root`, written unless an identical one is there (content-keyed)."""
    digest = hashlib.sha256(
        "".join(
            [
                task.model_dump_json(),
                *(p.read_text() for p in (GRADER, RUNNER, *RUNNER_HELPERS)),
                _TEST_SH,
                _SOLVE_SH,
            ]
        ).encode()
    ).hexdigest()[:16]
    out = Path(root) / digest / task.instance_id
    if not (out / "task.toml").is_file():  # content-keyed: one written by another process is the same
        write_task_dir(task, out, keep_existing=True)
    return out
