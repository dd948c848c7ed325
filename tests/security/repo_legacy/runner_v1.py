"""Run a repository task's listed tests as an unprivileged user; record outcomes where the tests cannot write.

Standard library only, and Python 3.6 or later (the Python of a row's environment runs it; annotations are
strings): this file is copied into the grading sandbox (and into exported task directories as
`tests/evsys_runner.py`) and runs with the environment's Python. `runner.py CONFIG OUT_DIR [--user NAME]`,
started as root:

- for each chunk of the listed ids it opens `OUT_DIR/.report-N` (OUT_DIR is root's, mode 0700) and starts the
  test command as `NAME` (no supplementary groups, HOME in a fresh private directory) with that file as an
  inherited descriptor — the test user can write only through it, never open it by path;
- the test command's `python -m pytest` / `pytest` becomes `python runner.py --child FD CONFIG ...`: pytest
  runs with this file's directory (root's) first on `sys.path` and the repository last, so nothing in the
  tree shadows pytest, its plugins or the standard library, and a reporting plugin (below) is registered
  directly (no entry point, no `-p`, nothing a nested pytest inherits);
- when pytest's process exits, the report is read from the descriptor (what anything writes later is never
  read); exactly one report per run is accepted — a second one (an `atexit` hook, a forked daemon) voids
  the run's outcomes;
- `OUT_DIR/outcomes.json` gets the outcomes, the ids the runner did not find, and the runs' log (kept for
  reading only: outcomes never come from the log).

An XFAIL counts only when it came from an `xfail` marker or from a `pytest.xfail()` call in a test file (the
config's `test_files`, or a `conftest.py`); one raised from anywhere else (the code under test) is recorded as
`XFAIL_OUTSIDE_TESTS`.
"""

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from typing import Any

REPORT_MARK = "evsys-report-v1"
MAX_REPORT_BYTES = 32 << 20
MAX_LOG_BYTES = 8 << 20
_NOT_FOUND = re.compile(r"ERROR: (?:not found|file or directory not found): (\S+)")
# `[prefix &&|;] (python[3[.x]] -m pytest | pytest | py.test) args`
_PYTEST_CMD = re.compile(
    r"^(?P<prefix>.*(?:&&|;)\s*)?(?:(?P<python>\S*python[0-9.]*)\s+-m\s+pytest|\S*py\.?test)(?=\s|$)(?P<args>.*)$",
    re.S,
)
HERE = os.path.dirname(os.path.abspath(__file__))


class Reporter:
    """The pytest plugin of the child: per-test outcomes, written once at the end of the session."""

    def __init__(self, fd: int, trusted: "set[str]", root: str) -> None:
        self.fd, self.trusted, self.root = fd, trusted, root
        self.outcomes: dict[str, str] = {}
        self.untrusted_xfail: set[str] = set()

    def _xfail_is_trusted(self, excinfo: "Any") -> bool:
        """Whether the `pytest.xfail()` call was made from a test file (the caller of xfail's frame)."""
        entries = list(excinfo.traceback)
        caller = str(entries[-2].path) if len(entries) >= 2 else ""
        rel = os.path.relpath(caller, self.root) if caller.startswith(self.root + os.sep) else caller
        return rel in self.trusted or os.path.basename(rel) == "conftest.py"

    def pytest_runtest_makereport(self, item: "Any", call: "Any") -> None:
        """Note xfails raised by a `pytest.xfail()` call outside the test files."""
        import pytest

        excinfo = call.excinfo
        if excinfo is not None and isinstance(excinfo.value, pytest.xfail.Exception):
            if not self._xfail_is_trusted(excinfo):
                self.untrusted_xfail.add(item.nodeid)

    def pytest_runtest_logreport(self, report: "Any") -> None:
        """The outcome of a test from its setup, call and teardown reports."""
        nodeid, current = report.nodeid, self.outcomes.get(report.nodeid)
        wasxfail = hasattr(report, "wasxfail")
        if report.when == "teardown":
            if report.failed:
                self.outcomes[nodeid] = "ERROR"
            return
        if report.when == "setup" and report.failed:
            status = "ERROR"
        elif report.when == "setup" and report.passed:
            return
        elif wasxfail and report.skipped:
            status = "XFAIL_OUTSIDE_TESTS" if nodeid in self.untrusted_xfail else "XFAIL"
        elif wasxfail and report.passed:
            status = "XPASS"
        else:
            status = {"passed": "PASSED", "failed": "FAILED", "skipped": "SKIPPED"}[report.outcome]
        if current != "ERROR":
            self.outcomes[nodeid] = status

    def pytest_sessionfinish(self, session: "Any") -> None:
        """Write the report through the descriptor, once."""
        data = json.dumps({"mark": REPORT_MARK, "outcomes": self.outcomes}).encode() + b"\n"
        if self.fd >= 0:
            os.write(self.fd, data)
            os.close(self.fd)
            self.fd = -1


def child(argv: "list[str]") -> int:
    """`runner.py --child FD CONFIG [pytest args...]`: pytest with the reporter, the tree last on sys.path."""
    fd, config = int(argv[2]), json.loads(open(argv[3]).read())
    os.set_inheritable(fd, False)  # nothing the tests start inherits it
    root = config["root"]
    drop = {"", ".", os.getcwd(), root}
    sys.path[:] = [p for p in sys.path if p not in drop]
    sys.path.append(root)
    import pytest

    trusted = set(config.get("test_files", []))
    return int(pytest.main(argv[4:], plugins=[Reporter(fd, trusted, root)]))


def child_command(test_cmd: str, fd: int, config_path: str) -> str:
    """The test command with its pytest invocation replaced by this file's child mode."""
    match = _PYTEST_CMD.match(test_cmd.strip())
    if match is None:
        raise SystemExit(f"test_cmd is not a pytest command this grader can run: {test_cmd!r}")
    python = match.group("python") or "python"
    runner = shlex.quote(os.path.abspath(__file__))
    own = f"exec {python} {runner} --child {fd} {shlex.quote(config_path)}"
    return (match.group("prefix") or "") + own + match.group("args")


def read_report(fd: int) -> "tuple[dict[str, str] | None, str]":
    """The one report in the descriptor's file (None and why when there is none, or more than one)."""
    data = os.pread(fd, MAX_REPORT_BYTES, 0)
    lines = [line for line in data.splitlines() if line.strip()]
    if not lines:
        return None, "the test run wrote no report (it crashed or was killed)"
    if len(lines) > 1:
        return None, "more than one report was written during the test run (tampering): outcomes void"
    try:
        report = json.loads(lines[0])
        outcomes = report["outcomes"]
        assert report["mark"] == REPORT_MARK and isinstance(outcomes, dict)
    except (ValueError, KeyError, TypeError, AssertionError):
        return None, "the test run's report is malformed: outcomes void"
    return {str(k): str(v) for k, v in outcomes.items()}, ""


class Runs:
    """Runs chunks of test ids as the test user; collects outcomes, missing ids, causes and the log."""

    def __init__(self, config_path: str, out: str, user: "str | None") -> None:
        self.config_path, self.out, self.user = config_path, out, user
        self.config = json.loads(open(config_path).read())
        self.outcomes: dict[str, str] = {}
        self.causes: list[str] = []
        self.log = open(os.path.join(out, "test_output.txt"), "wb")
        self.count = 0
        self.home = tempfile.mkdtemp(prefix="evsys-test-home-")
        if user is not None:
            import pwd

            entry = pwd.getpwnam(user)
            self.uid, self.gid = entry.pw_uid, entry.pw_gid
            os.chown(self.home, self.uid, self.gid)

    def _drop(self) -> None:
        """In the child before exec: the test user, no supplementary groups."""
        os.setgroups([])
        os.setgid(self.gid)
        os.setuid(self.uid)

    def run(self, ids: "list[str]") -> "tuple[dict[str, str], str]":
        """One run of the test command on `ids`: (outcomes, log text)."""
        self.count += 1
        report = os.open(os.path.join(self.out, f".report-{self.count}"), os.O_RDWR | os.O_CREAT, 0o600)
        log = tempfile.TemporaryFile(dir=self.out)
        command = child_command(self.config["test_cmd"], report, self.config_path)
        argv = ["/bin/bash", "-c", command + " " + shlex.join(ids)]
        env = {**os.environ, "HOME": self.home, "PYTHONDONTWRITEBYTECODE": "1"}
        root = self.config["root"]
        proc = subprocess.Popen(
            argv, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            pass_fds=[report], preexec_fn=self._drop if self.user else None,
        )  # fmt: skip
        proc.wait()  # pytest's own process: whatever it left behind is not waited for, nor read
        outcomes, cause = read_report(report)
        os.close(report)
        text = os.pread(log.fileno(), MAX_LOG_BYTES, 0).decode("utf-8", "replace")
        log.close()
        self.log.write(f"$ {shlex.join(argv)}\n{text}\n".encode())
        if cause:
            self.causes.append(cause)
        return outcomes or {}, text

    def run_chunk(self, ids: "list[str]") -> "tuple[dict[str, str], list[str]]":
        """Run one chunk; ids the runner did not find are dropped and the rest run again. Returns the
        outcomes and the missing ids."""
        missing: list[str] = []
        outcomes: dict[str, str] = {}
        while ids:
            outcomes, text = self.run(ids)
            root = self.config["root"]
            gone = {m[len(root) + 1 :] if m.startswith(root + "/") else m for m in _NOT_FOUND.findall(text)}
            # pytest names a parametrized id it cannot find by its function (`f`, not `f[x]`)
            found_missing = [i for i in ids if {i, i.split("::")[0], i.split("[")[0]} & gone]
            if not found_missing:
                break
            missing += found_missing
            ids = [i for i in ids if i not in found_missing]
        return outcomes, missing

    def recover_truncated(self, missing: "list[str]") -> "list[str]":
        """Parametrized ids pytest did not find: their whole test function runs, and each id gets the
        outcome of the runs whose id equals it, or equals it once cut at its first space (SWE-bench's lists
        hold such ids); PASSED only if every such run passed. Returns the ids still missing."""
        cut = [test for test in missing if "[" in test]
        if not cut:
            return missing
        nodes = list(dict.fromkeys(test.split("[", 1)[0] for test in cut))
        runs, _ = self.run_chunk(nodes)
        still = [test for test in missing if test not in cut]
        for test in cut:
            hits = [status for run, status in runs.items() if test in (run, run.split(" ", 1)[0])]
            if not hits:
                still.append(test)
                continue
            self.outcomes[test] = next((h for h in hits if h != "PASSED"), "PASSED")
        return still


def main(argv: "list[str]") -> int:
    """`runner.py CONFIG OUT_DIR [--user NAME]` (as root), or the child mode."""
    if len(argv) > 1 and argv[1] == "--child":
        return child(argv)
    config_path, out = argv[1], argv[2]
    user = argv[4] if len(argv) > 4 and argv[3] == "--user" else None
    runs = Runs(config_path, out, user)
    config = runs.config
    ids = list(dict.fromkeys(config["fail_to_pass"] + config["pass_to_pass"]))
    size = max(1, int(config.get("chunk_size", 200)))
    missing: list[str] = []
    for start in range(0, len(ids), size):
        outcomes, gone = runs.run_chunk(ids[start : start + size])
        runs.outcomes.update(outcomes)
        missing += gone
    missing = runs.recover_truncated(missing)
    runs.log.close()
    result = {"outcomes": runs.outcomes, "missing": sorted(set(missing)), "causes": runs.causes}
    tmp = os.path.join(out, ".outcomes.json.tmp")
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, os.path.join(out, "outcomes.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
