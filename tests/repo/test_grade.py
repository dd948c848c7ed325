"""The test runner (evsys.repo.runner) and the scoring (evsys.repo.grade): the runner's report against
pytest's own JUnit XML of the same run, chunked runs, test ids that do not exist, xfails by origin, and the
reward rule."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from evsys.repo import grade, runner

pytestmark = pytest.mark.slow  # each test starts pytest in a subprocess (~3-5 s here)

CASES = """import pytest


def test_pass():
    pass


def test_fail():
    assert 1 == 2, "one is not two - or is it"


@pytest.mark.skip(reason="not today")
def test_skip():
    pass


@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False


@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")


def test_error(broken):
    pass


@pytest.mark.parametrize("x", [1, 2, "a b"])
def test_param(x):
    assert x != 2


class TestGroup:
    def test_method(self):
        pass
"""


def _junit_outcomes(xml: Path) -> dict[str, str]:
    outcomes = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        path = case.get("classname").replace(".", "/")
        module, _, cls = path.partition("/TestGroup")
        test = f"{module}.py::{'TestGroup::' if cls == '' and '/TestGroup' in path else ''}{case.get('name')}"
        kinds = {child.tag for child in case}
        if "error" in kinds:
            outcomes[test] = "ERROR"
        elif "failure" in kinds:
            outcomes[test] = "FAILED"
        elif "skipped" in kinds:
            skipped = case.find("skipped")
            outcomes[test] = "XFAIL" if skipped.get("type") == "pytest.xfail" else "SKIPPED"
        else:
            outcomes[test] = "PASSED"
    return outcomes


def _run(tmp_path: Path, config: Path) -> Path:
    """The runner as this user (no --user), then the scoring: the output directory."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    assert runner.main(["runner", str(config), str(out)]) == 0
    grade.main(["grade", str(config), str(out)])
    return out


def test_the_runners_report_agrees_with_pytests_junit_xml(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_cases.py").write_text(CASES)
    xml = tmp_path / "junit.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={xml}", "tests"],
        cwd=tmp_path,
        capture_output=True,
    )
    expected = _junit_outcomes(xml)
    assert len(expected) == 9
    ids = sorted(expected)
    out = _run(tmp_path, _config(tmp_path, ids, [], chunk=100))
    outcomes = json.loads((out / "outcomes.json").read_text())["outcomes"]
    assert outcomes == expected
    assert outcomes["tests/test_cases.py::test_param[a b]"] == "PASSED"
    assert outcomes["tests/test_cases.py::test_xfail"] == "XFAIL"


def _config(tmp_path: Path, f2p: list[str], p2p: list[str], chunk: int, **extra: object) -> Path:
    cmd = f"{shlex.quote(sys.executable)} -m pytest -rA -v -p no:cacheprovider"
    config = {
        "test_cmd": cmd,
        "fail_to_pass": f2p,
        "pass_to_pass": p2p,
        "chunk_size": chunk,
        "root": str(tmp_path),
        **extra,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_huge_lists_run_in_chunks_and_a_missing_id_does_not_hide_the_rest(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_cases.py").write_text(CASES)
    t = "tests/test_cases.py::"
    f2p = [t + "test_pass", t + "test_nope", t + "test_param[1]"]
    p2p = [t + "test_fail", t + "TestGroup::test_method"]
    out = _run(tmp_path, _config(tmp_path, f2p, p2p, chunk=2))
    report = json.loads((out / "tests.json").read_text())
    log = (out / "test_output.txt").read_text()
    assert (
        log.count("\n$ ") + log.startswith("$ ") == 4
    )  # chunks [pass, nope] (rerun without nope), [1], [..]
    assert report["missing"] == [t + "test_nope"]
    assert report["FAIL_TO_PASS"] == {"passed": 2, "total": 3, "failing": {t + "test_nope": "MISSING"}}
    assert report["PASS_TO_PASS"]["failing"] == {t + "test_fail": "FAILED"}
    assert report["summary"] == "2 of 3 FAIL_TO_PASS pass; 1 of 2 PASS_TO_PASS pass"
    assert "test ids not found by the test runner: " + t + "test_nope" in report["cause"]
    assert json.loads((out / "reward.json").read_text()) == {"reward": 0.0}


def test_the_reward_is_one_only_when_every_listed_test_passes():
    both = ["a::x", "a::y"]
    assert grade.grade({"a::x": "PASSED", "a::y": "PASSED"}, both[:1], both[1:], [])["reward"] == 1.0
    report = grade.grade({"a::x": "PASSED", "a::y": "SKIPPED"}, both[:1], both[1:], [])
    assert report["reward"] == 0.0 and report["PASS_TO_PASS"]["failing"] == {"a::y": "SKIPPED"}
    assert grade.grade({"a::x": "PASSED"}, both[:1], both[1:], [])["tests"]["a::y"] == "NOT_RUN"


def test_an_id_cut_at_a_space_as_swe_bench_lists_them_is_matched_to_its_run(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_cases.py").write_text(CASES)
    t = "tests/test_cases.py::"
    p2p = [t + "test_param[a", t + "test_param[1]", t + "test_gone[x"]
    out = _run(tmp_path, _config(tmp_path, [t + "test_pass"], p2p, 10))
    report = json.loads((out / "tests.json").read_text())
    assert report["tests"][t + "test_param[a"] == "PASSED"  # the run of test_param[a b]
    assert report["tests"][t + "test_param[1]"] == "PASSED"  # valid, but pytest named its function not found
    assert report["tests"][t + "test_gone[x"] == "MISSING"
    assert report["missing"] == [t + "test_gone[x"]


XFAILS = """import pytest

from lib import compute


@pytest.mark.xfail(reason="known")
def test_marked():
    assert False


def test_xfail_call_in_the_test():
    pytest.xfail("the test itself says so")


def test_xfail_call_in_the_code():
    assert compute() == 2
"""


def test_an_xfail_counts_only_from_a_marker_or_a_test_file_never_from_the_code_under_test(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(XFAILS)
    (tmp_path / "lib.py").write_text("import pytest\n\n\ndef compute():\n    pytest.xfail('not my bug')\n")
    t = "tests/test_x.py::"
    ids = [t + "test_marked", t + "test_xfail_call_in_the_test", t + "test_xfail_call_in_the_code"]
    config = _config(tmp_path, ids, [], 10, test_files=["tests/test_x.py"])
    report = json.loads((_run(tmp_path, config) / "tests.json").read_text())
    assert report["tests"] == {
        t + "test_marked": "XFAIL",
        t + "test_xfail_call_in_the_test": "XFAIL",
        t + "test_xfail_call_in_the_code": "XFAIL_OUTSIDE_TESTS",
    }
    assert report["FAIL_TO_PASS"]["failing"] == {t + "test_xfail_call_in_the_code": "XFAIL_OUTSIDE_TESTS"}


def test_a_second_report_written_after_the_run_voids_its_outcomes(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_cases.py").write_text(CASES)
    hook = """import atexit, os

SAVED = []
for number in range(3, 256):  # every descriptor, whatever its number, kept past close
    try:
        SAVED.append(os.dup(number))
    except OSError:
        pass


def forge():
    for fd in SAVED:
        try:
            os.write(fd, b'{"body": "{}", "mac": ""}\\n')
        except OSError:
            pass


atexit.register(forge)
"""
    (tmp_path / "tests" / "conftest.py").write_text(hook)  # stands in for code under test
    t = "tests/test_cases.py::"
    out = _run(tmp_path, _config(tmp_path, [t + "test_pass"], [], 10))
    report = json.loads((out / "tests.json").read_text())
    assert "test_pass PASSED" in (out / "test_output.txt").read_text()  # the test itself passed
    assert report["reward"] == 0.0
    assert "went on after the runner's last report line" in report["cause"]


def test_a_pytest_module_in_the_tree_does_not_shadow_pytest_for_the_runner(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_cases.py").write_text(CASES)
    (tmp_path / "pytest.py").write_text("print('PASSED tests/test_cases.py::test_fail')\n")
    shadowed = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_cases.py::test_fail"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert (shadowed.returncode, shadowed.stdout) == (
        0,
        "PASSED tests/test_cases.py::test_fail\n",
    )  # it shadows
    t = "tests/test_cases.py::"
    report = json.loads(
        (_run(tmp_path, _config(tmp_path, [t + "test_fail"], [], 10)) / "tests.json").read_text()
    )
    assert report["tests"] == {t + "test_fail": "FAILED"}  # the real pytest ran it
