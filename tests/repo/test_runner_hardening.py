"""The grading pytest's process against code under test that fights back (evsys.repo.runner_child): each
attack of repo_attacks.IN_PROCESS_ATTACKS first scores 1.0 under the runner before hardening (kept as
tests/security/repo_legacy/runner_v1.py: the positive control), then 0.0 with findings under today's; the
gold fix scores 1.0 with no findings, no fix 0.0. The runner runs as this user here (no sandbox: the
sandboxed runs are tests/security/test_repo_grading.py)."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from calc_repo import calc_tree

from evsys.repo import grade, runner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
import repo_attacks

pytestmark = pytest.mark.slow  # each run starts pytest in a subprocess (~1-2 s here)
LEGACY = Path(__file__).resolve().parents[1] / "security" / "repo_legacy" / "runner_v1.py"
T = "tests/test_calc.py::"


def _grade(tmp_path: Path, extra: str, legacy: bool) -> dict:
    """The report of one grading of the tree."""
    root = tmp_path / ("legacy" if legacy else "hardened")
    config = calc_tree(root, extra)
    out = root / "out"
    out.mkdir()
    if legacy:
        subprocess.run([sys.executable, str(LEGACY), str(config), str(out)], check=True, timeout=120)
    else:
        assert runner.main(["runner", str(config), str(out)]) == 0
    result = json.loads((out / "outcomes.json").read_text())
    report = grade.report_from_outcomes(result, [T + "test_neg"], [T + "test_add", T + "test_mul"])
    report["log"] = (out / "test_output.txt").read_text()
    return report


def test_the_gold_fix_scores_one_with_no_findings_and_no_fix_zero(tmp_path):
    gold = "\n\ndef neg(a):\n    return -a\n"
    report = _grade(tmp_path / "gold", gold, legacy=False)
    assert report["reward"] == 1.0 and report["integrity"] == [], report
    nop = _grade(tmp_path / "nop", "", legacy=False)
    assert nop["reward"] == 0.0 and nop["integrity"] == []
    assert nop["tests"][T + "test_neg"] == "FAILED"


@pytest.mark.parametrize("attack", [a.__name__ for a in repo_attacks.IN_PROCESS_ATTACKS])
def test_an_attack_from_inside_pytest_wins_before_hardening_and_scores_zero_with_findings(tmp_path, attack):
    code = repo_attacks.ATTACK_CODE[attack]
    before = _grade(tmp_path, code, legacy=True)
    assert before["reward"] == 1.0, before  # the attack works against the runner as it was
    after = _grade(tmp_path, code, legacy=False)
    assert after["reward"] == 0.0, after
    assert after["integrity"], after
    assert T + "test_neg" in after["FAIL_TO_PASS"]["failing"]


def test_a_run_that_ends_before_the_runner_finished_is_void(tmp_path):
    report = _grade(tmp_path, repo_attacks.EARLY_EXIT, legacy=False)
    assert report["reward"] == 0.0
    assert "ended before the runner finished" in report["cause"]
    assert [f["kind"] for f in report["integrity"]] == ["run_void"]


def test_a_forgery_no_check_names_is_caught_by_a_canary(tmp_path):
    report = _grade(tmp_path, repo_attacks.EVERY_TEST_A_NO_OP, legacy=False)
    assert report["reward"] == 0.0
    assert {f["kind"] for f in report["integrity"]} == {"canary_failed", "run_void"}
    assert "must be FAILED" in report["cause"]


def test_canaries_sit_among_the_rows_tests_named_like_them(tmp_path):
    config = calc_tree(tmp_path)
    before = (tmp_path / "tests" / "test_calc.py").read_text()
    planted = runner.canaries.plant_canaries(str(tmp_path), ["tests/test_calc.py"], random.Random(7))
    after = (tmp_path / "tests" / "test_calc.py").read_text()
    assert sorted(planted.values()).count("FAILED") >= 4 and "PASSED" in planted.values()
    words = {"add", "mul", "sub", "neg"}
    for test in planted:
        name = test.split("::")[1]
        assert name.startswith("test_") and set(name[5:].split("_")) <= words | runner.canaries.FILLER_WORDS
        assert f"def {name}():" in after
    assert after.index("def test_add") > 0 and len(after) > len(before)
    assert json.loads(config.read_text())["fail_to_pass"] == [T + "test_neg"]  # the row's lists unchanged


FORGING_TOOLS = """

import os
import sys


def _try(name, use):
    try:
        use()
        print("EVSYS_TOOL_WORKED=" + name)
    except Exception:
        print("EVSYS_TOOL_REFUSED=" + name)


_try("import ctypes", lambda: __import__("ctypes"))
_try("gc.get_referrers", lambda: __import__("gc").get_referrers(sys))
_try("sys._current_frames", lambda: sys._current_frames())
_try("sys.settrace", lambda: sys.settrace(None))
_try("open /proc/self/mem", lambda: open("/proc/self/mem", "rb").close())
_try("sys._getframe", lambda: sys._getframe())
_try("compile", lambda: compile("x = 1", os.__file__, "exec"))


def neg(a):
    return -a
"""


def test_each_forging_tool_is_refused_and_recorded_while_an_honest_fix_still_scores(tmp_path):
    plain = subprocess.run([sys.executable, "-c", FORGING_TOOLS], capture_output=True, text=True, check=True)
    worked = {line.split("=", 1)[1] for line in plain.stdout.splitlines() if "WORKED" in line}
    assert len(worked) == 7, plain.stdout  # each tool works in a process without the hook
    report = _grade(tmp_path, FORGING_TOOLS, legacy=False)
    assert report["reward"] == 1.0  # refused, not faked: the outcomes stay the tests' own
    evidence = [f["evidence"] for f in report["integrity"] if f["kind"] == "audit_refused"]
    assert len(evidence) == 7, report["integrity"]
    for tool in worked:
        assert any(tool.split()[-1].split("/")[-1] in e for e in evidence), (tool, evidence)


def _signed(key: bytes, lines: list[str]) -> bytes:
    """Report lines as the audit hook writes them (`MAC SEQ KIND TEXT`)."""
    out = b""
    for seq, line in enumerate(lines):
        body = f"{seq} {line}".encode()
        out += hmac.new(key, body, hashlib.sha256).hexdigest().encode() + b" " + body + b"\n"
    return out


def _phases(test: str, call: str, raised: str = "null") -> list[str]:
    return [
        f'outcome {{"test": "{test}", "when": "setup", "status": null}}',
        f'armed {{"test": "{test}"}}',
        f'raised {{"test": "{test}", "raised": {raised}}}',
        f'outcome {{"test": "{test}", "when": "call", "status": "{call}", "tampered": null}}',
        f'outcome {{"test": "{test}", "when": "teardown", "status": null}}',
    ]


def test_the_report_counts_only_signed_complete_consistent_transcripts():
    key, t = b"k" * 32, "t.py::test_x"

    def verify(data: bytes, exit_code: int = 1) -> dict[str, str]:
        return runner.verify_report(data, key, exit_code, runner.Report()).outcomes()

    honest = _phases(t, "FAILED", '"AssertionError"')
    assert verify(_signed(key, [*honest, "finish 1 5"])) == {t: "FAILED"}
    with pytest.raises(runner.Void, match="ended before the runner finished"):
        verify(_signed(key, honest))  # no last line: an early exit
    with pytest.raises(runner.Void, match="not written by the runner"):
        verify(_signed(b"x" * 32, [*honest, "finish 1 5"]))  # another key: a forged line
    with pytest.raises(runner.Void, match="went on after"):
        verify(_signed(key, [*honest, "finish 1 5", 'refused {"x": 1}']))
    with pytest.raises(runner.Void, match="went on after"):
        verify(_signed(key, [*honest, "finish 1 5"]), exit_code=0)  # the process exited otherwise
    lied = _phases(t, "PASSED", '"AssertionError"')
    with pytest.raises(runner.Void, match="raised AssertionError"):
        verify(_signed(key, [*lied, "finish 1 5"]))  # a report patched to passed
    unwitnessed = [line for line in _phases(t, "PASSED") if not line.startswith("raised")]
    with pytest.raises(runner.Void, match="never returned or raised"):
        verify(_signed(key, [*unwitnessed, "finish 1 4"]))  # the function was not called through the witness
    twice = [*_phases(t, "FAILED", '"AssertionError"'), _phases(t, "PASSED")[3]]
    with pytest.raises(runner.Void, match="reported twice"):
        verify(_signed(key, [*twice, "finish 1 6"]))
