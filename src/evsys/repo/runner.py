"""Run a repository task's listed tests as an unprivileged user; record outcomes where the tests cannot write.

Standard library only, and Python 3.6 or later (the Python of a row's environment runs it; annotations are
strings): this file is copied into the grading sandbox (and into exported task directories as
`tests/evsys_runner.py`) and runs with the environment's Python. `runner.py CONFIG OUT_DIR [--user NAME]`,
started as root:

- it plants canaries (runner_canaries.py): tests of its own, named like their neighbours, placed among the
  row's tests in the row's test files, some that must fail and some that must pass; one that comes out
  wrong voids the run;
- for each chunk of the listed ids it starts the test command as `NAME` (no supplementary groups, HOME in a
  fresh private directory), its `python -m pytest` / `pytest` replaced by `runner_child.py` (the hardened
  pytest process: see there). The ids (canaries shuffled in), a pipe's write end and a fresh key go to it on
  stdin — nothing in its argv, environment or files; its output goes to a log it can only write;
- the report comes back through the pipe while the child runs: lines signed with the key, one per test
  phase and per refused audit event, ending in the runner's own last line. A line not signed, a phase
  reported twice, a call reported passed that raised, pytest's machinery replaced, no last line (an early
  `os._exit` / `sys.exit`, a kill) or anything after it voids the run's outcomes (`Void`);
- `OUT_DIR/outcomes.json` gets the outcomes, the ids the runner did not find, the causes, the findings
  (`audit_refused`, `always_equal`, `canary_failed`, `run_void`: {"kind", "evidence"}), and the runs' log is
  kept for reading only (outcomes never come from the log).

An XFAIL counts only when it came from an `xfail` marker or from a `pytest.xfail()` call in a test file (the
config's `test_files`, or a `conftest.py`); one raised from anywhere else (the code under test) is recorded as
`XFAIL_OUTSIDE_TESTS`.
"""

import hashlib
import hmac
import importlib.util
import json
import os
import random
import re
import select
import shlex
import subprocess
import sys
import tempfile
from typing import Any

MAX_REPORT_BYTES = 32 << 20
MAX_LOG_BYTES = 8 << 20
_NOT_FOUND = re.compile(r"ERROR: (?:not found|file or directory not found): (\S+)")
# `[prefix &&|;] (python[3[.x]] -m pytest | pytest | py.test) args`
_PYTEST_CMD = re.compile(
    r"^(?P<prefix>.*(?:&&|;)\s*)?(?:(?P<python>\S*python[0-9.]*)\s+-m\s+pytest|\S*py\.?test)(?=\s|$)(?P<args>.*)$",
    re.S,
)
HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, os.path.basename(__file__).replace("runner.py", "runner_child.py"))


def _sibling(name: str) -> "Any":
    """A helper module beside this file (`runner_X.py`; `evsys_runner_X.py` in an exported directory)."""
    path = os.path.join(HERE, os.path.basename(__file__).replace("runner.py", name))
    spec = importlib.util.spec_from_file_location("evsys_" + name[:-3], path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


canaries = _sibling("runner_canaries.py")
PHASES = ("setup", "call", "teardown")
PASSING_CALL = ("PASSED", "XPASS")


class Void(Exception):
    """The run's report cannot be trusted: its outcomes are void (the message says why)."""


class Report:
    """A run's verified report: outcomes, findings ({"kind", "evidence"}) and, for a void run, why."""

    def __init__(self) -> None:
        self.phases: dict[str, dict[str, str | None]] = {}
        self.findings: list[dict[str, str]] = []
        self.armed: dict[str, str | None] = {}  # test -> what its function raised ("" until it returned)
        self.marks: dict[str, str] = {}  # test -> an outcome that overrides pytest's (ALWAYS_EQUAL...)

    def outcome(self, body: dict) -> None:
        """One test phase. Tampering: a phase reported twice; a call of an armed test reported without its
        witness line, or reported passed while its function raised; a foreign hook implementation."""
        test, when, status = str(body.get("test")), body.get("when"), body.get("status")
        phases = self.phases.setdefault(test, {})
        if when not in PHASES or when in phases:
            raise Void(f"{test}: its {when} phase was reported twice (or is unknown)")
        phases[str(when)] = None if status is None else str(status)
        if when != "call":
            return
        if body.get("tampered"):
            raise Void(f"{test}: {body['tampered']}")
        raised = self.armed.get(test, None)
        if raised == "":
            raise Void(f"{test}: its call was reported, but its test function never returned or raised")
        if status in PASSING_CALL and raised is not None and raised != "None":
            raise Void(f"{test}: reported {status} though its test function raised {raised}")

    def arm(self, body: dict) -> None:
        """The test's function is about to be called through the witness."""
        test = str(body.get("test"))
        if test in self.armed:
            raise Void(f"{test}: armed twice")
        self.armed[test] = ""

    def witness(self, body: dict) -> None:
        """What the test's function raised (None: it returned)."""
        test = str(body.get("test"))
        if self.armed.get(test) != "":
            raise Void(f"{test}: a witness line for a call that was not armed, or a second one")
        self.armed[test] = str(body.get("raised"))

    def ready(self, body: dict) -> None:
        """pytest is set up (the audit hook took its snapshot of pytest's machinery)."""

    def refused(self, text: str) -> None:
        """An audit event the runner's hook refused."""
        self.findings.append({"kind": "audit_refused", "evidence": text})

    def tampered(self, text: str) -> None:
        """pytest's or the runner's machinery was replaced."""
        raise Void(text)

    def equal(self, body: dict) -> None:
        """An assertion operand that equals anything: its test does not pass."""
        self.marks[str(body.get("test"))] = "ALWAYS_EQUAL"
        self.findings.append({"kind": "always_equal", "evidence": str(body.get("evidence"))})

    def xfail_outside(self, body: dict) -> None:
        """A `pytest.xfail()` raised outside the test files: not the gold run's XFAIL."""
        self.marks.setdefault(str(body.get("test")), "XFAIL_OUTSIDE_TESTS")

    def outcomes(self) -> "dict[str, str]":
        """Each test's outcome: an error in setup or teardown wins, then the call's (or setup's skip)."""
        result = {}
        for test, phases in self.phases.items():
            statuses = [phases.get(when) for when in PHASES]
            if "ERROR" in (statuses[0], statuses[2]):
                result[test] = "ERROR"
            elif statuses[1] is not None or statuses[0] is not None:
                result[test] = statuses[1] or statuses[0]  # type: ignore[assignment]
            mark = self.marks.get(test)
            if mark == "ALWAYS_EQUAL" or (mark and result.get(test) == "XFAIL"):
                result[test] = mark
        return result


def verify_report(data: bytes, key: bytes, exit_code: int, report: Report) -> Report:
    """`report` filled from the run's lines (`MAC SEQ KIND TEXT`: HMAC-SHA256 with `key`, numbered from 0),
    ending in the runner's own last line (`finish EXIT COUNT`) and nothing after it. `Void` when any of that
    does not hold (what came before stays in `report`: its findings count)."""
    lines = [line for line in data.splitlines() if line.strip()]
    for seq, line in enumerate(lines):
        mac, _, signed = line.partition(b" ")
        good = hmac.new(key, signed, hashlib.sha256).hexdigest().encode()
        number, kind, text = ([*signed.decode("utf-8", "replace").split(" ", 2), "", ""])[:3]
        if not hmac.compare_digest(good, mac) or number != str(seq):
            raise Void("a report line not written by the runner (forged or garbled)")
        if kind == "finish":
            if seq != len(lines) - 1 or text != f"{exit_code} {seq}":
                raise Void("the run went on after the runner's last report line")
            return report
        _apply(report, kind, text)
    raise Void("the test run ended before the runner finished (an early exit, a kill or a crash)")


def _apply(report: Report, kind: str, text: str) -> None:
    """One signed line that is not the last."""
    if kind in TEXT_LINES:
        TEXT_LINES[kind](report, text)
        return
    try:
        body = json.loads(text)
        assert isinstance(body, dict)
    except (ValueError, AssertionError):
        raise Void(f"a {kind} line that does not parse") from None
    handler = JSON_LINES.get(kind)
    if handler is None:
        raise Void(f"an unknown report line {kind!r}")
    handler(report, body)


TEXT_LINES = {"refused": Report.refused, "tampered": Report.tampered}
JSON_LINES = {"outcome": Report.outcome, "armed": Report.arm, "raised": Report.witness, "ready": Report.ready}
JSON_LINES.update({"always_equal": Report.equal, "xfail_outside": Report.xfail_outside})


def child_command(test_cmd: str) -> str:
    """The test command with its pytest invocation replaced by the hardened child (runner_child.py): no
    descriptor, config or test id in its argv (they come on its stdin)."""
    match = _PYTEST_CMD.match(test_cmd.strip())
    if match is None:
        raise SystemExit(f"test_cmd is not a pytest command this grader can run: {test_cmd!r}")
    python = match.group("python") or "python"
    own = f"exec {python} {shlex.quote(CHILD)}"
    return (match.group("prefix") or "") + own + match.group("args")


class Runs:
    """Runs chunks of test ids as the test user; collects outcomes, missing ids, causes and the log."""

    def __init__(self, config_path: str, out: str, user: "str | None") -> None:
        self.config_path, self.out, self.user = config_path, out, user
        self.config = json.loads(open(config_path).read())
        self.outcomes: dict[str, str] = {}
        self.causes: list[str] = []
        self.log = open(os.path.join(out, "test_output.txt"), "wb")
        self.count = 0
        self.findings: list[dict[str, str]] = []
        self.rng = random.SystemRandom()
        self.canaries = canaries.plant_canaries(self.config["root"], _canary_files(self.config), self.rng)
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
        """One run of the test command on `ids` (and the canaries): (outcomes, log text). The ids, the
        report's descriptor and the run's key go to the child on its stdin; its report comes back through
        a pipe only this process reads."""
        self.count += 1
        key, (report, ours) = os.urandom(32), os.pipe()
        log_path = os.path.join(self.out, f".log-{self.count}")
        run_ids = list(ids) + sorted(self.canaries)
        self.rng.shuffle(run_ids)
        setup = {"ids": run_ids, "root": self.config["root"], "fd": ours, "key": key.hex()}
        setup["test_files"] = sorted({*self.config.get("test_files", []), *_canary_files(self.config)})
        command = child_command(self.config["test_cmd"])
        env = {**os.environ, "HOME": self.home, "PYTHONDONTWRITEBYTECODE": "1"}
        with open(log_path, "wb") as log:  # the child's output: write-only for it
            proc = subprocess.Popen(
                ["/bin/bash", "-c", command], cwd=self.config["root"], env=env, stdin=subprocess.PIPE,
                stdout=log, stderr=subprocess.STDOUT, pass_fds=[ours],
                preexec_fn=self._drop if self.user else None,
            )  # fmt: skip
        os.close(ours)
        data = _collect(proc, report, json.dumps(setup).encode())
        with open(log_path, "rb") as log:
            text = log.read(MAX_LOG_BYTES).decode("utf-8", "replace")
        self.log.write(f"$ {command}\n{text}\n".encode())
        verified, start = Report(), len(self.findings)
        try:
            outcomes = verify_report(data, key, proc.returncode, verified).outcomes()
            self._check_canaries(outcomes)
        except Void as exc:
            self.void(str(exc))
            return {}, text
        finally:
            self.findings[start:start] = verified.findings  # before this run's void, if any
        return {t: s for t, s in outcomes.items() if t not in self.canaries}, text

    def _check_canaries(self, outcomes: "dict[str, str]") -> None:
        """`Void` when a canary came out other than it must."""
        wrong = {
            t: outcomes.get(t, "NOT_RUN") for t, must in self.canaries.items() if outcomes.get(t) != must
        }
        if wrong:
            test, got = sorted(wrong.items())[0]
            self.findings.append(
                {"kind": "canary_failed", "evidence": f"{test}: {got}, must be {self.canaries[test]}"}
            )
            raise Void(f"a canary test came out wrong ({test}: {got}, must be {self.canaries[test]})")

    def void(self, why: str) -> None:
        """A run whose outcomes are void: the cause and a finding."""
        self.causes.append(f"the test run is void: {why}")
        self.findings.append({"kind": "run_void", "evidence": why})

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


def _canary_files(config: dict) -> "list[str]":
    """The test files the listed ids name (where canaries go)."""
    ids = config["fail_to_pass"] + config["pass_to_pass"]
    return sorted({i.split("::", 1)[0] for i in ids if "::" in i and i.split("::", 1)[0].endswith(".py")})


def _collect(proc: "subprocess.Popen[bytes]", report: int, setup: bytes) -> bytes:
    """Send the setup, then read the report pipe until the child exits (and what it wrote by then); what
    a process it left behind writes later is never read."""
    try:
        assert proc.stdin is not None
        proc.stdin.write(setup)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    os.set_blocking(report, False)
    chunks: list[bytes] = []
    size, done = 0, False
    while not done and size <= MAX_REPORT_BYTES:
        done = proc.poll() is not None  # read once more after the exit
        select.select([report], [], [], 0.2)
        while size <= MAX_REPORT_BYTES:
            try:
                chunk = os.read(report, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    proc.wait()
    os.close(report)
    return b"".join(chunks) if size <= MAX_REPORT_BYTES else b"oversized"


def main(argv: "list[str]") -> int:
    """`runner.py CONFIG OUT_DIR [--user NAME]` (as root)."""
    config_path, out = argv[1], argv[2]
    user = argv[4] if len(argv) > 4 and argv[3] == "--user" else None
    if user is not None:
        os.chmod(config_path, 0o600)  # the test ids are the runner's: the test user never reads them
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
    result: dict[str, Any] = {"outcomes": runs.outcomes, "missing": sorted(set(missing))}
    result["causes"] = runs.causes
    result["findings"] = runs.findings
    tmp = os.path.join(out, ".outcomes.json.tmp")
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, os.path.join(out, "outcomes.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
