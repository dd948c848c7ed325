"""Red team: a root agent against the verifier's shell, and the agent's /tmp as the verifier sees it.

A task whose agent runs as root can write `/etc/ld.so.preload`: the library it names loads into every process
that starts afterwards, the verifier's `/bin/bash /tests/test.sh` included, and can rewrite the reward as the
shell exits. The verification run covers that file with one of its own. The verifier also sees the files of
the agent's /tmp (as Harbor's does) without following a link planted there, even where the kernel's
`fs.protected_symlinks` would not stop root. Every write into a verifier place comes back as an integrity
finding. Each test first shows its attack works in the sandbox (the planted library loads into a normal
command; the link resolves into the reward file).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from test_private_verifier import FORGED, START_SURVIVOR, reward_the_engine_reads, write_tests

from evsys.records.integrity import IntegrityKind
from evsys.verify import ScriptVerifier
from evsys.verify.script import places_written

pytestmark = pytest.mark.security

# Loads into every process: notes the process's command line in /var/tmp (shared with the verifier) and, as
# the process exits, writes a perfect reward wherever it can.
PRELOAD_C = r"""
#include <stdio.h>
#include <stdlib.h>
static void forge(void) {
    FILE *f = fopen("/logs/verifier/reward.txt", "w");
    if (f) { fputs("1\n", f); fclose(f); }
}
__attribute__((constructor)) static void loaded(void) {
    char cmd[512] = {0};
    FILE *c = fopen("/proc/self/cmdline", "r");
    size_t n = c ? fread(cmd, 1, sizeof cmd - 1, c) : 0;
    if (c) fclose(c);
    for (size_t i = 0; i < n; i++) if (!cmd[i]) cmd[i] = ' ';
    FILE *m = fopen("/var/tmp/preload-loaded", "a");
    if (m) { fprintf(m, "%s\n", cmd); fclose(m); }
    atexit(forge);
}
"""
# the variables a root agent can leave for shells that read the system's start files
ENV_FILES = ("/etc/environment", "/etc/profile", "/etc/bash.bashrc", "/root/.bashrc", "/root/.profile")
TEST_SH = (
    "#!/bin/bash\n"
    "echo 0 > /logs/verifier/reward.txt\n"
    "/bin/true\n"  # a child process: the library would load into it too
    'echo "ld-vars: $(env | grep -c ^LD_)"\n'
)


def build_preload(tmp_path: Path) -> Path:
    """The forging library, compiled on the host (the default sandbox runs the host's libc)."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the preload library")
    source, lib = tmp_path / "forge.c", tmp_path / "forge.so"
    source.write_text(PRELOAD_C)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    return lib


async def test_a_preload_a_root_agent_planted_never_loads_into_the_verifier(sandbox, tmp_path):
    await sandbox.upload(build_preload(tmp_path), "/opt/forge.so")
    plant = "echo /opt/forge.so > /etc/ld.so.preload;" + "".join(
        f" echo 'export LD_PRELOAD=/opt/forge.so' >> {f};" for f in ENV_FILES
    )
    assert (await sandbox.exec(plant + " echo planted", user="root")).stdout.strip() == "planted"
    # positive control: the library loads into a normal command in the sandbox, and forges from there
    control = await sandbox.exec(
        "mkdir -p /logs/verifier; /bin/true; cat /var/tmp/preload-loaded", user="root"
    )
    assert "/bin/true" in control.stdout, (control.stdout, control.stderr)
    assert (await sandbox.exec("cat /logs/verifier/reward.txt")).stdout.strip() == "1"

    verifier = ScriptVerifier(write_tests(tmp_path, TEST_SH), timeout_sec=60)
    result = await verifier.run_tests(sandbox)
    assert await reward_the_engine_reads(sandbox, tmp_path / "trial") == {"reward": 0.0}
    loaded = (await sandbox.exec("cat /var/tmp/preload-loaded", user="root")).stdout
    assert "/tests/test.sh" not in loaded  # neither test.sh's shell nor its children
    assert "ld-vars: 0" in (tmp_path / "trial" / "verifier" / "test-stdout.txt").read_text()
    findings = places_written(result.stderr)
    assert [(f.kind, f.evidence) for f in findings if f.kind == IntegrityKind.PRELOAD_PLANTED] == [
        (IntegrityKind.PRELOAD_PLANTED, "/etc/ld.so.preload")
    ]
    # the agent's file is still there for its own processes: only the verifier's view is covered
    assert (await sandbox.exec("cat /etc/ld.so.preload")).stdout.strip() == "/opt/forge.so"


@pytest.fixture
def symlinks_unprotected():
    """The host's fs.protected_symlinks set to 0 (root follows any link in a sticky /tmp), restored after."""
    path = Path("/proc/sys/fs/protected_symlinks")
    try:
        before = path.read_text().strip()
        path.write_text("0")
    except OSError as exc:
        pytest.skip(f"cannot set fs.protected_symlinks here: {exc}")
    yield
    path.write_text(before)


TMP_TEST_SH = (
    "#!/bin/bash\n"
    'if [ "$(cat /tmp/work/answer.txt)" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
    f"echo '{FORGED}' > /tmp/scratch.json\n"  # a scratch file where the agent planted a link
    "ls -l /tmp/work; ls -ld /tmp/work\n"
    "echo 7 > /tmp/work/answer.txt\n"  # the tests' own write: never reaches the agent's file
)


async def test_the_verifier_sees_the_agents_tmp_but_never_its_links(sandbox, tmp_path, symlinks_unprotected):
    setup = (
        "mkdir -p /tmp/work && echo 42 > /tmp/work/answer.txt && chmod 640 /tmp/work/answer.txt"
        " && ln -s /logs/verifier/reward.json /tmp/work/link"
        " && ln -s /logs/verifier/reward.json /tmp/scratch.json && readlink -f /tmp/scratch.json"
    )
    planted = await sandbox.exec(setup, user="agent")
    # positive control: the link resolves into the reward file, and root may write there
    assert planted.stdout.strip() == "/logs/verifier/reward.json", planted.stderr
    verifier = ScriptVerifier(write_tests(tmp_path, TMP_TEST_SH), timeout_sec=60)
    result = await verifier.run_tests(sandbox)
    # the answer the agent left in /tmp scores (Harbor's semantics), with its owner and mode kept
    assert await reward_the_engine_reads(sandbox, tmp_path / "trial") == {"reward": 1.0}
    listing = (tmp_path / "trial" / "verifier" / "test-stdout.txt").read_text()
    assert "-rw-r----- 1 agent agent" in listing, listing
    [directory] = [line.split() for line in listing.splitlines() if line.endswith(" /tmp/work")]
    assert (directory[0], directory[2], directory[3]) == ("drwxr-xr-x", "agent", "agent"), listing
    assert " link" not in listing  # the agent's links are hidden, in subdirectories too
    # the scratch write went into the verifier's own file, not through the link into reward.json
    assert not (tmp_path / "trial" / "verifier" / "reward.json").exists()
    findings = places_written(result.stderr)
    assert sorted((f.kind, f.evidence) for f in findings) == [
        (IntegrityKind.VERIFIER_PLACE_WRITTEN, "/tmp/scratch.json"),
        (IntegrityKind.VERIFIER_PLACE_WRITTEN, "/tmp/work/link"),
    ]
    # the agent's /tmp is as it left it
    still = await sandbox.exec("test -L /tmp/scratch.json && echo link; cat /tmp/work/answer.txt")
    assert still.stdout.split() == ["link", "42"]


# A root survivor that waits for the tests to start and only then plants a link where they will write
# (after the verification run looked at /tmp): the link shows in the verifier's /tmp but is never followed.
LATE_LINKER = """
until grep -qs '/tests/tes[t]\\.sh' /proc/[0-9]*/cmdline; do sleep 0.01; done
ln -s /logs/verifier/reward.json /tmp/result.json && echo linked > /var/tmp/late-link
"""
LATE_TEST_SH = (
    "#!/bin/bash\n"
    "echo 0 > /logs/verifier/reward.txt\n"
    "for i in $(seq 250); do [ -f /var/tmp/late-link ] && break; sleep 0.02; done\n"  # no lookup in /tmp
    "[ -L /tmp/result.json ] && echo saw-the-link\n"
    f"echo '{FORGED}' > /tmp/result.json\n"
)


async def test_a_link_planted_while_the_tests_run_is_never_followed(sandbox, tmp_path, symlinks_unprotected):
    started = await sandbox.exec(START_SURVIVOR, user="root", stdin=LATE_LINKER.encode())
    assert started.stdout.strip() == "started", started.stderr
    await ScriptVerifier(write_tests(tmp_path, LATE_TEST_SH), timeout_sec=60).run_tests(sandbox)
    # positive control: the survivor planted its link during the run, into the reward file; the tests saw it
    planted = await sandbox.exec("cat /var/tmp/late-link; readlink -f /tmp/result.json", user="root")
    assert planted.stdout.split() == ["linked", "/logs/verifier/reward.json"], planted.stderr
    assert await reward_the_engine_reads(sandbox, tmp_path / "trial") == {"reward": 0.0}
    output = (tmp_path / "trial" / "verifier" / "test-stdout.txt").read_text()
    assert "saw-the-link" in output and "Too many levels of symbolic links" in output, output
    assert not (tmp_path / "trial" / "verifier" / "reward.json").exists()


async def test_writes_to_the_verifiers_places_become_findings_and_an_honest_run_has_none(
    sandbox, make_sandbox, tmp_path
):
    tests = write_tests(tmp_path, "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    honest = await ScriptVerifier(tests, timeout_sec=60).run_tests(sandbox)
    assert places_written(honest.stderr) == []
    cheater = await make_sandbox()
    cheat = (
        "mkdir -p /tests /logs/verifier && echo 'echo 1 > /logs/verifier/reward.txt' > /tests/test.sh"
        " && echo 1 > /logs/verifier/reward.txt && echo done"
    )
    assert (await cheater.exec(cheat, user="root")).stdout.strip() == "done"
    result = await ScriptVerifier(tests, timeout_sec=60).run_tests(cheater)
    findings = places_written(result.stderr)
    assert sorted(f.evidence for f in findings) == ["/logs/verifier/reward.txt", "/tests/test.sh"]
    assert {f.source for f in findings} == {"verifier"}


# A root survivor swapping the directory the verifier's /tests is attached onto: each round moves /tests
# away (the run's mount goes with it) and moves a forged one with a check.sh that scores 1 into its place.
SWAPPER = """
i=0
while :; do
  i=$((i+1)); mkdir -p /f.$i
  echo 'echo 1 > /logs/verifier/reward.txt; echo forged-check' > /f.$i/check.sh
  if mv -T /tests /old.$i 2>>/var/tmp/swap-errors; then mv -T /f.$i /tests && echo $i >> /var/tmp/swapped; fi
  sleep 0.02
done
"""
SWAP_TEST_SH = "#!/bin/bash\nsleep 0.5\nbash /tests/check.sh\n"  # reads its tests after the swapper had time


async def test_a_root_survivor_cannot_swap_the_directory_under_the_verifiers_tests(sandbox, tmp_path):
    assert (await sandbox.exec("mkdir -p /tests && echo made", user="root")).stdout.strip() == "made"
    started = await sandbox.exec(START_SURVIVOR, user="root", stdin=SWAPPER.encode())
    assert started.stdout.strip() == "started", started.stderr
    # positive control: the swap works on the sandbox's /tests while no verification has sealed it
    swapped = await sandbox.exec("sleep 0.3; wc -l < /var/tmp/swapped", user="root")
    assert int(swapped.stdout.split()[0]) > 1, (swapped.stdout, swapped.stderr)
    tests = write_tests(tmp_path, SWAP_TEST_SH)
    (tests / "check.sh").write_text("echo 0 > /logs/verifier/reward.txt; echo honest-check\n")
    await ScriptVerifier(tests, timeout_sec=60).run_tests(sandbox)
    assert await reward_the_engine_reads(sandbox, tmp_path / "trial") == {"reward": 0.0}
    assert "honest-check" in (tmp_path / "trial" / "verifier" / "test-stdout.txt").read_text()
    # from the first verification on, /tests is a mountpoint the sandbox's own processes cannot move
    errors = await sandbox.exec("cat /var/tmp/swap-errors; touch /tests/x", user="root")
    assert "Device or resource busy" in errors.stdout and "Read-only file system" in errors.stderr
