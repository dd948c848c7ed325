"""Score a repository task's test outcomes: the reward and the per-test report (standard library only).

The outcomes come from `evsys.repo.runner` (a structured report written where the tests cannot write, never
the test log). evsys scores them on the host (`evsys.repo.fresh`); an exported task directory's
`tests/test.sh` runs this file (as `evsys_grade.py`) in the sandbox after the runner: `evsys_grade.py CONFIG
OUT_DIR [--cause TEXT]` reads `OUT_DIR/outcomes.json` and writes `reward.json` (`reward` 1.0 iff every
FAIL_TO_PASS and PASS_TO_PASS test passed) and `tests.json` (every outcome, the failing ids, a one-line
summary, and `integrity`: what the runner saw the tested code try, e.g. a refused audit event) into OUT_DIR.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

PASSED, XFAIL, MISSING = "PASSED", "XFAIL", "MISSING"
# XFAIL from an xfail marker or a test file's pytest.xfail(): as in the gold run. XFAIL_OUTSIDE_TESTS (raised
# by the code under test), XPASS, SKIPPED, FAILED, ERROR, NOT_RUN and MISSING do not pass.
PASSING = (PASSED, XFAIL)


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
            if status not in PASSING:
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


def report_from_outcomes(result: dict, fail_to_pass: list[str], pass_to_pass: list[str]) -> dict:
    """The report of a runner's `outcomes.json` (its outcomes, missing ids and causes)."""
    outcomes = {str(k): str(v) for k, v in dict(result.get("outcomes") or {}).items()}
    missing = [str(m) for m in result.get("missing") or []]
    report = grade(outcomes, fail_to_pass, pass_to_pass, missing)
    causes = [str(c) for c in result.get("causes") or []]
    if missing:
        causes.append("test ids not found by the test runner: " + ", ".join(sorted(set(missing))))
    if causes:
        report["cause"] = "; ".join(dict.fromkeys(causes))
    report["integrity"] = [
        {"kind": str(f.get("kind")), "evidence": str(f.get("evidence")), "source": "repo.runner"}
        for f in result.get("findings") or []
        if isinstance(f, dict)
    ]
    return report


def main(argv: list[str]) -> int:
    """`evsys_grade.py CONFIG OUT_DIR [--cause TEXT]`."""
    config = json.loads(Path(argv[1]).read_text())
    out = Path(argv[2])
    if len(argv) > 4 and argv[3] == "--cause":
        cause_only(out, argv[4])
        return 0
    try:
        result = json.loads((out / "outcomes.json").read_text())
    except (OSError, ValueError) as exc:
        cause_only(out, f"the test runner left no outcomes: {exc}")
        return 0
    report = report_from_outcomes(result, config["fail_to_pass"], config["pass_to_pass"])
    write_report(out, report)
    print(summary_line(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
