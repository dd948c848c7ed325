"""Run a repository task's listed tests, parse per-test outcomes, write the reward (standard library only).

This file is copied into every repository task's `tests/` (as `evsys_grade.py`) and runs inside the sandbox as
the last step of `tests/test.sh`, in evsys and in Harbor alike. It reads `tests/config.json` (`test_cmd`,
`fail_to_pass`, `pass_to_pass`, `chunk_size`), runs the test command on the listed ids in chunks (a huge list
never makes one giant command line), drops ids the runner reports as not found (and records them) and reruns
the rest of that chunk, parses the runner's log (pytest's `-rA` short summary, the lines SWE-bench's
`parse_log_pytest` reads), and writes `reward.json` (`reward` 1.0 iff every FAIL_TO_PASS and PASS_TO_PASS test
passed) and `tests.json` (every outcome, the failing ids, a one-line summary) into the verifier log directory.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TextIO

PASSED, FAILED, SKIPPED, ERROR, XFAIL, XPASS, MISSING = (
    "PASSED",
    "FAILED",
    "SKIPPED",
    "ERROR",
    "XFAIL",
    "XPASS",
    "MISSING",
)
_STATUSES = (PASSED, FAILED, SKIPPED, ERROR, XFAIL, XPASS)
_VERBOSE = re.compile(r"^(\S.*?::.*?) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)(?: |$)")
_NOT_FOUND = re.compile(r"ERROR: (?:not found|file or directory not found): (\S+)")


def parse_pytest_log(log: str) -> dict[str, str]:
    """Per-test outcomes from pytest output run with `-rA` (`STATUS test_id[ - message]` summary lines) and
    `-v` (`test_id STATUS [ nn%]` progress lines: the only place a skipped test is named by id). A test seen
    twice keeps its last outcome (the summary comes after the progress lines)."""
    outcomes: dict[str, str] = {}
    for raw in log.splitlines():
        line = raw.strip()
        for status in _STATUSES:
            if line.startswith(status + " "):
                test = line[len(status) + 1 :].split(" - ", 1)[0].strip()
                if "::" in test or test.endswith(".py"):
                    outcomes[test] = status
                break
        else:
            verbose = _VERBOSE.match(line)
            if verbose:
                outcomes[verbose.group(1)] = verbose.group(2)
    return outcomes


def _strip_root(test: str, root: str) -> str:
    return test[len(root) + 1 :] if root and test.startswith(root + "/") else test


def run_chunk(cmd: str, ids: list[str], log_file: TextIO, root: str) -> tuple[str, list[str]]:
    """Run one chunk; ids the runner did not find are dropped and the rest run again. Returns the log of the
    last run and the missing ids."""
    missing: list[str] = []
    while True:
        argv = shlex.split(cmd) + ids
        proc = subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=root or None, check=False
        )
        text = proc.stdout.decode("utf-8", "replace")
        log_file.write(f"$ {shlex.join(argv)}\n{text}\n")
        gone = {_strip_root(m, root) for m in _NOT_FOUND.findall(text)}
        # pytest names a parametrized id it cannot find by its function (`f`, not `f[x]`)
        found_missing = [i for i in ids if {i, i.split("::")[0], i.split("[")[0]} & gone]
        if not found_missing:
            return text, missing
        missing += found_missing
        ids = [i for i in ids if i not in found_missing]
        if not ids:
            return "", missing


def recover_truncated(
    cmd: str, missing: list[str], outcomes: dict[str, str], log_file: TextIO, root: str
) -> list[str]:
    """Parametrized ids pytest did not find: their whole test function runs, and each id gets the outcome of
    the runs whose id equals it, or equals it once cut at its first space (SWE-bench's lists hold such ids:
    its log parser splits lines on whitespace); PASSED only if every such run passed. Also recovers the valid
    ids of a function pytest reported not found for another, invalid id. Returns the ids still missing."""
    cut = [test for test in missing if "[" in test]
    if not cut:
        return missing
    nodes = list(dict.fromkeys(test.split("[", 1)[0] for test in cut))
    text, _ = run_chunk(cmd, nodes, log_file, root)
    runs = parse_pytest_log(text)
    still = [test for test in missing if test not in cut]
    for test in cut:
        hits = [status for run, status in runs.items() if test in (run, run.split(" ", 1)[0])]
        if not hits:
            still.append(test)
            continue
        outcomes[test] = PASSED if all(h == PASSED for h in hits) else next(h for h in hits if h != PASSED)
    return still


def grade(
    outcomes: dict[str, str], fail_to_pass: list[str], pass_to_pass: list[str], missing: list[str]
) -> dict:
    """The report: per list, how many passed and which did not (with their outcome), plus the reward."""
    report: dict = {"tests": {}, "missing": sorted(set(missing))}
    ok = True
    lines = []
    for name, ids in (("FAIL_TO_PASS", fail_to_pass), ("PASS_TO_PASS", pass_to_pass)):
        failing = {}
        for test in ids:
            status = MISSING if test in missing else outcomes.get(test, "NOT_RUN")
            report["tests"][test] = status
            if status not in (PASSED, XFAIL):
                failing[test] = status
        ok = ok and not failing
        report[name] = {"passed": len(ids) - len(failing), "total": len(ids), "failing": failing}
        if ids:
            lines.append(f"{len(ids) - len(failing)} of {len(ids)} {name} pass")
    report["summary"] = "; ".join(lines)
    report["reward"] = 1.0 if ok else 0.0
    return report


def summary_line(report: dict) -> str:
    """The report in one line: counts per list, then the failing ids with their outcomes, then the cause."""
    text = report.get("summary") or ""
    failing = {
        **report.get("FAIL_TO_PASS", {}).get("failing", {}),
        **report.get("PASS_TO_PASS", {}).get("failing", {}),
    }
    if failing:
        shown = ", ".join(f"{test} ({status})" for test, status in list(failing.items())[:5])
        text += f"; failing: {shown}" + (f" and {len(failing) - 5} more" if len(failing) > 5 else "")
    cause = report.get("cause")
    if cause and cause != text:
        text += f" ({cause})"
    return text


def write_report(out: Path, report: dict) -> None:
    """tests.json and reward.json in `out` (written to temp names, then renamed)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, data in (("tests.json", report), ("reward.json", {"reward": report["reward"]})):
        tmp = out / f".{name}.tmp"
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, out / name)


def cause_only(out: Path, cause: str) -> None:
    """A run that could not test at all (the test patch did not apply): reward 0 and the cause."""
    write_report(out, {"reward": 0.0, "cause": cause, "summary": cause, "tests": {}, "missing": []})
    print(cause)


def main(argv: list[str]) -> int:
    """`evsys_grade.py CONFIG OUT_DIR [--cause TEXT]`."""
    config = json.loads(Path(argv[1]).read_text())
    out = Path(argv[2])
    if len(argv) > 4 and argv[3] == "--cause":
        cause_only(out, argv[4])
        return 0
    f2p, p2p = config["fail_to_pass"], config["pass_to_pass"]
    ids = list(dict.fromkeys(f2p + p2p))
    size = max(1, int(config.get("chunk_size", 200)))
    outcomes: dict[str, str] = {}
    missing: list[str] = []
    with open(out / "test_output.txt", "w", encoding="utf-8") as log_file:
        for start in range(0, len(ids), size):
            text, gone = run_chunk(config["test_cmd"], ids[start : start + size], log_file, config["root"])
            outcomes.update(parse_pytest_log(text))
            missing += gone
        missing = recover_truncated(config["test_cmd"], missing, outcomes, log_file, config["root"])
    report = grade(outcomes, f2p, p2p, missing)
    if missing:
        report["cause"] = "test ids not found by the test runner: " + ", ".join(sorted(set(missing)))
    write_report(out, report)
    print(summary_line(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
