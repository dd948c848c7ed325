"""A small Python repository with bugs, made by the tests (git init), and SWE-bench-style rows on it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from evsys.agent.base import Agent

CALC = '''"""A tiny calculator."""


def add(a, b):
    return a + b


def sub(a, b):
    return a + b


def neg(a):
    return a


def mul(a, b):
    return a * b
'''

TESTS = """from calc import add, mul


def test_add():
    assert add(2, 3) == 5


def test_mul():
    assert mul(2, 3) == 6
"""

EXTRA_TESTS = """

def test_sub():
    from calc import sub

    assert sub(5, 3) == 2


def test_neg():
    from calc import neg

    assert neg(4) == -4
"""

PACKAGES = ["pytest==8.3.4"]


def _git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PATH": "/usr/bin:/bin",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(repo),
    }
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    ).stdout


def _diff_of(repo: Path, base: str, path: str, text: str) -> str:
    """The patch that changes `path` to `text` on top of `base` (made on a branch, committed: the fix is in
    the repository's history, as upstream fixes are)."""
    _git(repo, "checkout", "-q", "--detach", base)
    (repo / path).write_text(text)
    _git(repo, "commit", "-qam", f"change {path}")
    return _git(repo, "diff", base, "HEAD")


def make_calc_repo(root: Path) -> tuple[Path, str, dict[str, str]]:
    """The repository, its base commit, and patches: gold fixes, a test patch, a gold that breaks `add`."""
    repo = root / "calc-repo"
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "calc" / "__init__.py").write_text(CALC)
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "calc with bugs")
    base = _git(repo, "rev-parse", "HEAD").strip()
    patches = {
        "fix_sub": _diff_of(
            repo,
            base,
            "calc/__init__.py",
            CALC.replace("return a + b\n\n\ndef neg", "return a - b\n\n\ndef neg"),
        ),
        "fix_neg": _diff_of(
            repo, base, "calc/__init__.py", CALC.replace("    return a\n", "    return -a\n")
        ),
        "fix_sub_break_add": _diff_of(
            repo,
            base,
            "calc/__init__.py",
            CALC.replace("return a + b\n\n\ndef neg", "return a - b\n\n\ndef neg").replace(
                "return a + b\n\n\ndef sub", "return a + b + 1\n\n\ndef sub"
            ),
        ),
        "tests": _diff_of(repo, base, "tests/test_calc.py", TESTS + EXTRA_TESTS),
    }
    _git(repo, "checkout", "-q", "main")
    return repo, base, patches


def calc_rows(repo: Path, base: str, patches: dict[str, str]) -> list[dict]:
    """Rows on the calc repository: two good instances, a gold that breaks PASS_TO_PASS, a test patch that
    does not apply, a test id that does not exist, and an install command that fails."""
    p2p = ["tests/test_calc.py::test_add", "tests/test_calc.py::test_mul"]

    def row(iid: str, gold: str, f2p: list[str], test_patch: str | None = None) -> dict:
        return {
            "instance_id": iid,
            "repo": str(repo),
            "base_commit": base,
            "patch": patches[gold],
            "test_patch": test_patch if test_patch is not None else patches["tests"],
            "FAIL_TO_PASS": json.dumps(f2p),
            "PASS_TO_PASS": json.dumps(p2p),
            "problem_statement": f"{iid}: the calculator is wrong.",
            "packages": PACKAGES,
            "python": "3.11",
        }

    broken = patches["tests"].replace("assert mul(2, 3) == 6", "assert mul(2, 3) == 7 # no such line")
    return [
        row("calc-sub", "fix_sub", ["tests/test_calc.py::test_sub"]) | {"install": [SETUP_NET]},
        row("calc-neg", "fix_neg", ["tests/test_calc.py::test_neg"]),
        row("calc-breaks-add", "fix_sub_break_add", ["tests/test_calc.py::test_sub"]),
        row(
            "calc-bad-test-patch",
            "fix_sub",
            ["tests/test_calc.py::test_sub"],
            broken.replace(" def test_mul", " def test_mull"),
        ),
        row(
            "calc-missing-test", "fix_sub", ["tests/test_calc.py::test_sub", "tests/test_calc.py::test_nope"]
        ),
        row("calc-bad-install", "fix_sub", ["tests/test_calc.py::test_sub"])
        | {"install": ["echo no wheel >&2; exit 3"]},
    ]


def calc_tree(root: Path, extra: str = "") -> Path:
    """The calc repository as a grading tree of calc-neg (the test patch in, `extra` appended to the package),
    with a runner config for this Python's pytest; the config's path."""
    (root / "calc").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "calc" / "__init__.py").write_text(CALC + extra)
    (root / "tests" / "test_calc.py").write_text(TESTS + EXTRA_TESTS)
    t = "tests/test_calc.py::"
    config = {
        "test_cmd": f"{sys.executable} -m pytest -rA -v -p no:cacheprovider",
        "fail_to_pass": [t + "test_neg"],
        "pass_to_pass": [t + "test_add", t + "test_mul"],
        "root": str(root),
        "test_files": ["tests/test_calc.py"],
    }
    (root / "config.json").write_text(json.dumps(config))
    return root / "config.json"


def write_rows(path: Path, rows: list[dict]) -> Path:
    """Rows as JSONL."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


NET = "import socket; socket.create_connection(('pypi.org', 443), timeout=5); print('open')"
# run by calc-sub's install command, with the start network: the positive control of the agent's closed one
SETUP_NET = f'python3 -c "{NET}" > /tmp/evsys-setup-net 2>&1 || echo closed > /tmp/evsys-setup-net'
PROBE = f"""NET="{NET}"
cd /testbed
echo "commits=$(git log --all --oneline | wc -l)"
echo "solution=$(ls /solution 2>/dev/null | wc -l)"
echo "tests=$(ls /tests 2>/dev/null | wc -l)"
echo "dirty=$(git status --porcelain | wc -l)"
echo "setup_net=$(cat /tmp/evsys-setup-net 2>/dev/null || echo none)"
echo "agent_net=$(python3 -c "$NET" 2>/dev/null || echo closed)"
echo "owner_is_me=$(test -O calc/__init__.py && echo yes || echo no)"
printf 'def test_sub():\\n    pass\\n' > tests/test_calc.py
echo "wrote_tests=$(grep -c 'pass$' tests/test_calc.py)"
"""


class ProbeAgent(Agent):
    """An agent that looks for the gold patch and the test patch, then tries to pre-empt the test patch by
    replacing the test file with a `test_sub` that always passes (what it saw goes into its metadata)."""

    name = "probe"
    version = "1.0"

    async def setup(self, sandbox, ctx) -> None:
        """Nothing to install."""

    async def run(self, instruction, sandbox, ctx):
        """Run the probe script as the agent."""
        from evsys.agent.base import AgentResult

        result = await sandbox.exec(PROBE)
        pairs = [line.split("=", 1) for line in result.stdout.splitlines() if "=" in line]
        return AgentResult(metadata={k: v for k, v in pairs})
