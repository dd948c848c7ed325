"""Red team: reading and writing outside the sandbox's own filesystem."""

# ruff: noqa: ASYNC240 - tiny host-side probes of what the sandbox may have touched

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

import pytest
from redteam import redteam_spec

from evsys.records import FileCopy
from evsys.sandbox import LocalSandbox

pytestmark = pytest.mark.security
HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("host_dir", ["/tmp", "/root", str(HERE)])
async def test_host_canary_files_are_unreadable(sandbox, host_dir):
    token = secrets.token_hex(16)
    fd, path = tempfile.mkstemp(prefix=".evsys-canary-", dir=host_dir)
    try:
        os.write(fd, token.encode())
        os.close(fd)
        for user in ("agent", "root"):
            # positive control: a copy of the token the sandbox writes itself, which the search must find
            r = await sandbox.exec(
                f"echo {token}-inside > /tmp/own; cat {path};"
                f" grep -rs {token} /tmp /root /home /work /var 2>/dev/null",
                user=user,
            )
            assert f"/tmp/own:{token}-inside" in r.stdout.splitlines(), r.stdout + r.stderr
            assert "No such file or directory" in r.stderr or "Permission denied" in r.stderr
            leaked = [line for line in r.stdout.splitlines() if token in line and "-inside" not in line]
            assert leaked == [], f"{user} read the host canary in {host_dir}"
    finally:
        os.unlink(path)


async def test_host_shadow_is_not_visible(sandbox):
    host = Path("/etc/shadow").read_text()
    r = await sandbox.exec("cat /etc/shadow", user="root")
    assert r.stdout != host
    assert "root:*:" in r.stdout  # the sandbox's own generated file, no hashes
    agent = await sandbox.exec("cat /etc/shadow")
    assert agent.exit_code != 0


async def test_the_checkout_and_host_homes_are_absent(sandbox):
    r = await sandbox.exec("ls /work /home/* /var /root 2>&1; ls -a /home", user="root")
    assert "main" not in r.stdout and ".venv" not in r.stdout
    assert r.stdout.split()[-3:] == [".", "..", "agent"]


@pytest.mark.parametrize("user", ["agent", "root"])
async def test_system_dirs_are_read_only(sandbox, user):
    r = await sandbox.exec("touch /usr/evsys-pwn || touch /usr/bin/evsys-pwn || echo blocked", user=user)
    assert r.stdout.strip().endswith("blocked")
    assert r.stderr.count("touch: cannot touch") == 2  # both writes were attempted
    assert not Path("/usr/evsys-pwn").exists() and not Path("/usr/bin/evsys-pwn").exists()


async def test_writes_to_host_paths_stay_inside(sandbox):
    target = f"/var/tmp/evsys-escape-{secrets.token_hex(4)}"
    r = await sandbox.exec(
        f"mkdir -p /var/tmp; echo pwned > {target}; echo root:x:0:0::/:/bin/sh >> /etc/passwd;"
        f" cat {target}; tail -1 /etc/passwd",
        user="root",
    )
    assert r.stdout.split() == ["pwned", "root:x:0:0::/:/bin/sh"]  # the writes happened, in the sandbox
    assert not Path(target).exists()
    assert (
        "pwned" not in Path("/etc/passwd").read_text() and ":/:/bin/sh" not in Path("/etc/passwd").read_text()
    )


async def test_agent_cannot_edit_etc_or_root_home(sandbox):
    r = await sandbox.exec(
        "echo x >> /etc/passwd; echo x > /root/f; echo x > /logs/verifier/reward.txt; echo $?"
    )
    assert "Permission denied" in r.stderr
    assert r.stdout.strip() != "0"


@pytest.mark.needs_sandbox
async def test_tests_and_solution_are_absent_before_upload(tmp_path):
    task = tmp_path / "task"
    (task / "tests").mkdir(parents=True)
    (task / "tests" / "test.sh").write_text("secret-test")
    (task / "solution").mkdir()
    (task / "solution" / "solve.sh").write_text("secret-solution")
    (task / "environment").mkdir()
    (task / "environment" / "main.py").write_text("print(1)")
    spec = redteam_spec(files=[FileCopy(src=task / "environment", dst="/app")])
    async with LocalSandbox(spec) as sb:
        r = await sb.exec(
            "ls -d /tests /solution; grep -rs secret- / --exclude-dir=proc --exclude-dir=sys", user="root"
        )
        assert "secret-test" not in r.stdout and "secret-solution" not in r.stdout
        assert "No such file or directory" in r.stderr
        await sb.upload(task / "tests", "/tests")
        assert (await sb.exec("cat /tests/test.sh")).stdout == "secret-test"


async def test_proc_sys_and_sys_are_not_writable(sandbox):
    r = await sandbox.exec(
        "echo '|/tmp/x' > /proc/sys/kernel/core_pattern; echo 1 > /proc/sys/vm/drop_caches;"
        " echo x > /sys/kernel/uevent_helper; ls /sys | wc -l",
        user="root",
    )
    assert r.stderr.count("Read-only file system") >= 2
    assert "|/tmp/x" not in Path("/proc/sys/kernel/core_pattern").read_text()


async def test_no_host_devices(sandbox):
    r = await sandbox.exec("ls /dev", user="root")
    names = set(r.stdout.split())
    assert {"null", "zero", "urandom"} <= names
    assert not names & {"vda", "sda", "mem", "kmem", "port", "kmsg"}
