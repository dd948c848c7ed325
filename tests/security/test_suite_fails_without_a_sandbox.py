"""The red-team suite must fail against a sandbox that runs nothing: a test that passes when no command runs
only checks that something is absent, and would keep passing if the sandbox's protection were deleted."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from redteam import NOOP_ENV, noop_mode

pytestmark = [pytest.mark.security, pytest.mark.slow]
HERE = Path(__file__).resolve().parent
# Tests that run no command in a sandbox at all: bad input refused before a sandbox starts, and the host side
# of the daemon protocol (frames, a stopped daemon). A new test belongs here only if it runs none either.
RUN_NO_COMMAND = {
    "test_bad_allowed_hosts_are_refused_naming_the_entry",
    "test_frame_lengths_over_4gib_do_not_wrap",
    "test_an_oversize_frame_is_refused_with_a_clear_error",
    "test_a_lying_frame_length_fails_requests_instead_of_hanging",
    "test_a_wedged_daemon_is_killed_not_waited_on",
    # a spec refused before anything starts
    "test_a_sandbox_started_without_network_cannot_be_given_one",
    # what the task's Dockerfile makes of PATH, and how a cut output is shown: checked on the parsed task and
    # on a given ExecResult, no command in a sandbox
    "test_dockerfile_path_reaches_the_trial",
    "test_env_path_expansion_starts_from_the_default_path",
    "test_env_path_expansion_starts_from_the_base_images_path",
    "test_a_dockerfile_that_sets_no_path_leaves_the_sandboxs_own",
    "test_harness_tool_output_shows_the_marker",
}
# These drive their sandbox from a child process (whose peak memory is what they measure) or through `spawn`,
# which the in-process no-op switch does not reach; their positive controls run there.
OUT_OF_THE_SWITCHS_REACH = {
    "test_yes_for_five_seconds_stays_bounded_in_the_orchestrator",
    "test_spawned_process_nobody_reads_is_paused_not_buffered",
    # --keep-state's walk of an upper layer on the host: the race it defends against is staged on the host
    "test_a_file_swapped_for_a_link_to_a_host_secret_is_not_read",
    "test_a_directory_swapped_for_a_link_to_a_host_directory_is_not_walked",
}


def _outcomes(report: Path) -> dict[str, str]:
    """test id -> passed / failed / skipped, from a JUnit XML report."""
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        state = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        outcomes[f"{case.get('classname')}::{case.get('name')}"] = state
    return outcomes


@pytest.mark.skipif(noop_mode(), reason="this test runs the suite against the no-op sandbox itself")
def test_the_suite_fails_against_a_sandbox_whose_exec_does_nothing(tmp_path):
    report = tmp_path / "noop.xml"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(HERE)]
    argv += [f"--junitxml={report}", f"--ignore={Path(__file__)}"]
    env = dict(os.environ, **{NOOP_ENV: "1"})
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800, check=False)
    outcomes = _outcomes(report)
    assert len(outcomes) > 20, run.stdout[-3000:]  # the suite really ran, against the no-op sandbox
    assert run.returncode == 1, run.stdout[-3000:]
    passed = sorted(t for t, state in outcomes.items() if state == "passed")
    exempt = RUN_NO_COMMAND | OUT_OF_THE_SWITCHS_REACH
    unexpected = [t for t in passed if t.rsplit("::", 1)[1].split("[")[0] not in exempt]
    assert unexpected == [], f"these tests pass although no command ran in the sandbox: {unexpected}"
    assert sum(state == "failed" for state in outcomes.values()) > len(outcomes) // 2
