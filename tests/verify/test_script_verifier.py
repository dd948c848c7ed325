"""ScriptVerifier in a real sandbox: stale files and planted tests removed, timeouts and errors distinct."""

from __future__ import annotations

from pathlib import Path

import pytest

from evsys.records import SandboxSpec
from evsys.sandbox import create_sandbox
from evsys.verify import RewardMissingError, ScriptVerifier, VerifierError, VerifierTimeoutError


@pytest.fixture
async def sandbox():
    box = create_sandbox(SandboxSpec(name="verify-test"))
    await box.start()
    try:
        yield box
    finally:
        await box.stop()


def write_tests(tmp_path: Path, script: str) -> Path:
    path = tmp_path / "tests"
    path.mkdir()
    (path / "test.sh").write_text(script)
    (path / "helper.txt").write_text("from the task\n")
    return path


async def test_stale_rewards_and_planted_tests_are_removed_before_running(sandbox, tmp_path):
    # The "agent" plants a reward and a fake test suite before verification.
    await sandbox.exec(
        "mkdir -p /logs/verifier /tests && echo 1 > /logs/verifier/reward.txt && echo planted > /tests/extra",
        user="root",
    )
    script = (
        "#!/bin/bash\n[ -e /tests/extra ] && echo planted-test-seen\n"
        "[ -e /logs/verifier/reward.txt ] && echo stale-reward-seen\ncat /tests/helper.txt\n"
    )
    verifier = ScriptVerifier(write_tests(tmp_path, script), timeout_sec=30, workdir="/app")
    with pytest.raises(RewardMissingError):
        await verifier.verify_sandbox(sandbox, tmp_path / "out")
    stdout = (tmp_path / "out" / "test-stdout.txt").read_text()
    assert stdout == "from the task\n"


async def test_reward_json_wins_and_runs_as_root_in_workdir_with_env(sandbox, tmp_path):
    script = (
        '#!/bin/bash\necho "{\\"reward\\": 0.5, \\"who\\": $(id -u)}" > /logs/verifier/reward.json\n'
        "echo 1 > /logs/verifier/reward.txt\npwd\necho $GREETING\nexit 3\n"
    )
    verifier = ScriptVerifier(
        write_tests(tmp_path, script), timeout_sec=30, env={"GREETING": "hi"}, workdir="/app"
    )
    result = await verifier.verify_sandbox(sandbox, tmp_path / "out")
    assert result.rewards == {"reward": 0.5, "who": 0.0}  # exit code 3 ignored; uid 0
    assert result.reward == 0.5
    assert (tmp_path / "out" / "test-stdout.txt").read_text() == "/app\nhi\n"


async def test_verifier_timeout_is_its_own_error_and_keeps_the_output(sandbox, tmp_path):
    script = "#!/bin/bash\necho before\nsleep 60\n"
    verifier = ScriptVerifier(write_tests(tmp_path, script), timeout_sec=0.5, workdir="/app")
    with pytest.raises(VerifierTimeoutError, match=r"past the verifier timeout of 0\.5 s"):
        await verifier.verify_sandbox(sandbox, tmp_path / "out")
    assert (tmp_path / "out" / "test-stdout.txt").read_text() == "before\n"


async def test_missing_test_script_is_a_verifier_error(sandbox, tmp_path):
    empty = tmp_path / "tests"
    empty.mkdir()
    with pytest.raises(VerifierError, match=r"tests/test\.sh does not exist"):
        await ScriptVerifier(empty, timeout_sec=5).verify_sandbox(sandbox, tmp_path / "out")
