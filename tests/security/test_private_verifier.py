"""Red team: the agent's surviving processes against the verifier's reward.

Processes the agent leaves running survive into verification (Harbor's semantics: its services keep
running). Here a survivor forges the reward while test.sh runs, as the agent user (with `[verifier] user =
"agent"`, when /logs/verifier belongs to that user) and as root (task code, the oracle): it writes
/logs/verifier/reward.json in a loop, and also through `/proc/<pid>/root` of every process it can see (the
way into another mount namespace). And a link the agent planted in /tmp waits for a verifier that writes a
scratch file there. Each test proves its attack ran (the survivor's write is in the sandbox's own
/logs/verifier, it saw test.sh's process; the link exists and resolves into the reward) and then that the
reward the engine reads (`copy_logs_out` of /logs, as a trial does) is the verifier's own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evsys.engine.logs import copy_logs_out
from evsys.records import CopyOutLimits
from evsys.verify import ScriptVerifier
from evsys.verify.base import read_reward_files

pytestmark = pytest.mark.security

FORGED = '{"reward": 1.0}'
# The survivor: forge the reward through every path it can find until killed; note each process it saw run
# test.sh and each /proc/<pid>/root write that worked.
SURVIVOR = f"""
while true; do
  echo '{FORGED}' > /logs/verifier/reward.json 2>/dev/null && touch /tmp/attack/direct
  echo ok > /proc/$$/root/tmp/attack/own-root
  for p in /proc/[0-9]*; do
    grep -qF /tests/test.sh $p/cmdline 2>/dev/null || continue  # test.sh's processes only
    echo "$p" >> /tmp/attack/saw-verifier
    if echo '{FORGED}' > $p/root/logs/verifier/reward.json 2>/dev/null; then
      echo "$p" >> /tmp/attack/via-proc
    fi
    echo '{FORGED}' > $p/cwd/../logs/verifier/reward.json 2>/dev/null && echo "$p" >> /tmp/attack/via-proc
  done
  sleep 0.02
done
"""
START_SURVIVOR = (
    "mkdir -p /tmp/attack; chmod 777 /tmp/attack; cat > /tmp/attack/survivor.sh;"
    " setsid nohup bash /tmp/attack/survivor.sh > /dev/null 2>&1 & echo started"
)
# test.sh: long enough for the survivor to find it, then the honest reward 0
TEST_SH = "#!/bin/bash\nsleep 1.5\necho 0 > /logs/verifier/reward.txt\necho tests-ran\n"


def write_tests(root: Path, script: str) -> Path:
    """A tests/ dir with `script` as test.sh."""
    tests = root / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text(script)
    return tests


async def reward_the_engine_reads(sandbox, trial_dir: Path) -> dict:
    """Copy /logs out as a trial does and parse the reward the engine would score."""
    await copy_logs_out(sandbox, "/logs", trial_dir, CopyOutLimits())
    return read_reward_files(trial_dir / "verifier").rewards


@pytest.mark.parametrize("who", ["agent", "root"])
async def test_a_surviving_process_cannot_write_the_verifiers_reward(sandbox, tmp_path, who):
    # the agent user forges against a verifier run as that user (/logs/verifier is that user's then); root
    # against the default root verifier
    started = await sandbox.exec(START_SURVIVOR, user=who, stdin=SURVIVOR.encode())
    assert started.stdout.strip() == "started", started.stderr
    verifier = ScriptVerifier(write_tests(tmp_path, TEST_SH), timeout_sec=60, user=who)
    result = await verifier.run_tests(sandbox)
    # positive control: the survivor ran throughout test.sh and saw its process; writing through a process's
    # /proc/<pid>/root works (for its own); root's direct writes land in the sandbox's own /logs/verifier
    seen = await sandbox.exec("sort -u /tmp/attack/saw-verifier; ls /tmp/attack", user="root")
    assert "/proc/" in seen.stdout and "own-root" in seen.stdout, (seen.stdout, seen.stderr)
    if who == "root":
        assert "direct" in seen.stdout
        assert (await sandbox.exec("cat /logs/verifier/reward.json")).stdout.strip() == FORGED
    assert "via-proc" not in seen.stdout  # no write through test.sh's /proc/<pid>/root got in
    # the reward is the verifier's own
    assert await reward_the_engine_reads(sandbox, tmp_path / "trial") == {"reward": 0.0}
    assert "tests-ran" in (tmp_path / "trial" / "verifier" / "test-stdout.txt").read_text()
    assert result.exit_code == 0


SCRATCH_TEST_SH = (
    "#!/bin/bash\n"
    "echo 0 > /logs/verifier/reward.txt\n"
    f"echo '{FORGED}' > /tmp/scratch.json\n"  # e.g. an intermediate result kept in /tmp
    "cat /tmp/scratch.json\n"
)


async def test_the_verifier_never_follows_a_link_the_agent_planted_in_tmp(sandbox, tmp_path):
    planted = await sandbox.exec(
        "ln -s /logs/verifier/reward.json /tmp/scratch.json && readlink /tmp/scratch.json", user="agent"
    )
    # positive control: the link exists and resolves into the reward file (for root, who may write there)
    assert planted.stdout.strip() == "/logs/verifier/reward.json"
    resolved = await sandbox.exec("readlink -f /tmp/scratch.json; test -L /tmp/scratch.json && echo link")
    assert resolved.stdout.split() == ["/logs/verifier/reward.json", "link"]
    verifier = ScriptVerifier(write_tests(tmp_path, SCRATCH_TEST_SH), timeout_sec=60)
    await verifier.run_tests(sandbox)
    assert await reward_the_engine_reads(sandbox, tmp_path / "trial") == {"reward": 0.0}
    # the verifier wrote its scratch file into a /tmp of its own; the agent's link is still there, untouched
    assert FORGED in (tmp_path / "trial" / "verifier" / "test-stdout.txt").read_text()
    still = await sandbox.exec("test -L /tmp/scratch.json && echo link; cat /logs/verifier/reward.json")
    assert still.stdout.split() == ["link"]


async def test_the_verifiers_tests_cannot_be_swapped_by_a_surviving_root_process(sandbox, tmp_path):
    swapper = (
        "mkdir -p /tmp/attack; while true; do mkdir -p /tests;"
        " printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh 2>/dev/null"
        " && touch /tmp/attack/swapped; sleep 0.01; done"
    )
    started = await sandbox.exec(
        f"setsid nohup bash -c {swapper!r} > /dev/null 2>&1 & echo started", user="root"
    )
    assert started.stdout.strip() == "started"
    # positive control: the swapper writes its test.sh into the sandbox's /tests (until a verification run
    # seals that directory: see test_verifier_places.py)
    written = await sandbox.exec("sleep 0.2; test -f /tmp/attack/swapped && cat /tests/test.sh")
    assert written.stdout.count("echo 1") == 1
    verifier = ScriptVerifier(write_tests(tmp_path, TEST_SH), timeout_sec=60)
    await verifier.run_tests(sandbox)
    assert await reward_the_engine_reads(sandbox, tmp_path / "trial") == {"reward": 0.0}


async def test_the_next_verification_starts_with_fresh_logs(sandbox, tmp_path):
    tests = write_tests(
        tmp_path, "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\ntouch /logs/verifier/old\n"
    )
    verifier = ScriptVerifier(tests, timeout_sec=60)
    await verifier.run_tests(sandbox)
    assert await reward_the_engine_reads(sandbox, tmp_path / "one") == {"reward": 1.0}  # control
    assert (tmp_path / "one" / "verifier" / "old").exists()
    (tests / "test.sh").write_text("#!/bin/bash\nls -A /logs/verifier\n")
    await verifier.run_tests(sandbox)
    # the second run saw an empty /logs/verifier (but for its own output file) and left no reward
    await copy_logs_out(sandbox, "/logs", tmp_path / "two", CopyOutLimits())
    assert sorted(p.name for p in (tmp_path / "two" / "verifier").iterdir()) == ["test-stdout.txt"]
    assert (tmp_path / "two" / "verifier" / "test-stdout.txt").read_text().split() == ["test-stdout.txt"]
