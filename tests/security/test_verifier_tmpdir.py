"""The verifier's TMPDIR: a temp directory of its own where its tools' links are followed (apt, dpkg, mktemp).

The verifier's `/tmp` never follows a link (a link the agent planted there cannot steer it), so a tool that
makes and follows its own links under `/tmp` (apt's `apt-dpkg-install-*` directory) failed with "Too many
levels of symbolic links". A verification run's `TMPDIR` is a fresh tmpfs of its own inside that `/tmp`, where
links are followed and which no process of the agent's can reach or fill beforehand.
"""

from __future__ import annotations

import pytest
from test_private_verifier import FORGED, START_SURVIVOR, reward_the_engine_reads, write_tests

from evsys.verify import ScriptVerifier

pytestmark = pytest.mark.security

VERIFIER_TMPDIR = "/tmp/.verifier-tmp"

OWN_LINKS_SH = (
    "#!/bin/bash\n"
    'echo "tmpdir=$TMPDIR"\n'
    "echo hello > /tmp/target.txt\n"
    # the control: /tmp itself follows no link
    "ln -s /tmp/target.txt /tmp/in-tmp && cat /tmp/in-tmp || echo in-tmp-refused\n"
    'd=$(mktemp -d) && ln -s /tmp/target.txt "$d/l" && cat "$d/l" && echo 1 > /logs/verifier/reward.txt\n'
)


async def test_links_the_verifier_makes_in_its_tmpdir_are_followed(sandbox, tmp_path):
    result = await ScriptVerifier(write_tests(tmp_path, OWN_LINKS_SH), timeout_sec=60).run_tests(sandbox)
    reward = await reward_the_engine_reads(sandbox, tmp_path / "trial")
    output = (tmp_path / "trial" / "verifier" / "test-stdout.txt").read_text()
    # positive control: a link in /tmp itself is still never followed, even the verifier's own
    assert "in-tmp-refused" in output, (output, result.stderr)
    assert f"tmpdir={VERIFIER_TMPDIR}" in output, output
    assert reward == {"reward": 1.0}, output


# Plants the TMPDIR's directory with a file and a link into the reward file; a survivor writes there while
# the tests run.
PLANT = (
    f"mkdir -p {VERIFIER_TMPDIR} && chmod 777 {VERIFIER_TMPDIR} && echo agent > {VERIFIER_TMPDIR}/planted"
    f" && ln -sf /logs/verifier/reward.json {VERIFIER_TMPDIR}/result.json"
    f" && readlink -f {VERIFIER_TMPDIR}/result.json"
)
LATE_PLANTER = f"""
until grep -qs '/tests/tes[t]\\.sh' /proc/[0-9]*/cmdline; do sleep 0.01; done
echo late > {VERIFIER_TMPDIR}/late && echo wrote > /var/tmp/late-plant
"""
PLANTED_SH = (
    "#!/bin/bash\n"
    "echo 0 > /logs/verifier/reward.txt\n"
    "for i in $(seq 250); do [ -f /var/tmp/late-plant ] && break; sleep 0.02; done\n"
    'echo "tmpdir=$TMPDIR entries: $(ls -A "$TMPDIR" | wc -l)"\n'
    f"echo '{FORGED}' > \"$TMPDIR/result.json\"\n"
    'echo mine > "$TMPDIR/verifier-file"\n'
)


@pytest.mark.parametrize("who", ["agent", "root"])
async def test_the_agent_cannot_reach_or_pre_plant_the_verifiers_tmpdir(sandbox, tmp_path, who):
    planted = await sandbox.exec(PLANT, user=who)
    # positive control: the planted link resolves into the reward file
    assert planted.stdout.strip() == "/logs/verifier/reward.json", planted.stderr
    started = await sandbox.exec(START_SURVIVOR, user=who, stdin=LATE_PLANTER.encode())
    assert started.stdout.strip() == "started", started.stderr
    await ScriptVerifier(write_tests(tmp_path, PLANTED_SH), timeout_sec=60).run_tests(sandbox)
    # the survivor wrote during the run, into its own /tmp
    seen = await sandbox.exec(f"cat /var/tmp/late-plant; ls -A {VERIFIER_TMPDIR}", user="root")
    assert seen.stdout.split() == ["wrote", "late", "planted", "result.json"], seen.stderr
    assert await reward_the_engine_reads(sandbox, tmp_path / "trial") == {"reward": 0.0}
    output = (tmp_path / "trial" / "verifier" / "test-stdout.txt").read_text()
    # nothing the agent planted, early or late
    assert f"tmpdir={VERIFIER_TMPDIR} entries: 0" in output, output
    assert not (tmp_path / "trial" / "verifier" / "reward.json").exists()
