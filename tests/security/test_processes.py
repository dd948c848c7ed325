"""Red team: processes, privileges, seccomp and the daemon's control channel."""

# ruff: noqa: ASYNC220 - host-side victim processes for the sandbox to try to reach

from __future__ import annotations

import asyncio
import re
import subprocess

import pytest
from redteam import host_pids_with

pytestmark = pytest.mark.security

SYSCALL = (
    "python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True);"
    " r = l.syscall({nr}, {args}); print(r, ctypes.get_errno())'"
)


async def test_host_processes_are_invisible(sandbox):
    host = subprocess.Popen(["sleep", "321.987"])
    try:
        r = await sandbox.exec("ps -eo args; ls /proc | grep -c '^[0-9]'", user="root")
        assert "ps -eo args" in r.stdout  # positive control: the sandbox's own processes are listed
        assert "321.987" not in r.stdout
        assert int(r.stdout.split()[-1]) < 10
    finally:
        host.kill()
        host.wait()


async def test_host_processes_cannot_be_signalled(sandbox):
    host = subprocess.Popen(["sleep", "322.987"])
    try:
        r = await sandbox.exec(
            f"sleep 100 & p=$!; kill -9 {host.pid}; echo rc=$?; kill -9 -1; wait $p; echo status=$?",
            user="root",
        )
        # positive control: kill -9 -1 did kill the sandbox's own sleep
        assert r.stdout.split() == ["rc=1", "status=137"], r.stdout + r.stderr
        assert host.poll() is None
    finally:
        host.kill()
        host.wait()


async def test_agent_has_no_capabilities(sandbox):
    r = await sandbox.exec("grep -E '^Cap(Eff|Prm|Amb)' /proc/self/status")
    assert [line.split()[1] for line in r.stdout.splitlines()] == ["0000000000000000"] * 3


async def test_root_keeps_only_a_small_bounding_set(sandbox):
    r = await sandbox.exec("grep -E '^Cap(Eff|Bnd)' /proc/self/status", user="root")
    assert len(r.stdout.splitlines()) == 2 and int(r.stdout.split()[1], 16) & 1, "root keeps CAP_CHOWN"
    for line in r.stdout.splitlines():
        value = int(line.split()[1], 16)
        assert not value & (1 << 21), "CAP_SYS_ADMIN must be gone"
        assert not value & (1 << 19), "CAP_SYS_PTRACE must be gone"


async def test_setuid_binaries_do_not_grant_root(sandbox):
    await sandbox.exec("cp /bin/bash /tmp/rootbash && chmod 4755 /tmp/rootbash", user="root")
    r = await sandbox.exec("/tmp/rootbash -p -c 'id -u; id -ur'; su -c id root </dev/null; echo done")
    assert r.stdout.split()[:2] == [str(sandbox.agent_uid)] * 2
    assert "uid=0" not in r.stdout


@pytest.mark.parametrize("user", ["agent", "root"])
async def test_ptrace_is_denied(sandbox, user):
    r = await sandbox.exec(
        "sleep 30 & p=$!; strace -p $p -o /dev/null 2>&1 | head -1; "
        + SYSCALL.format(nr=101, args="16, 1, 0, 0"),
        user=user,
    )
    assert "attached" not in r.stdout
    assert r.stdout.split()[-2:] == ["-1", "1"]  # ptrace(PTRACE_ATTACH, 1) -> EPERM


async def test_mount_is_denied(sandbox):
    r = await sandbox.exec(
        "mkdir -p /tmp/m; mount -t tmpfs none /tmp/m; echo rc=$?; grep -c ' /tmp/m ' /proc/mounts",
        user="root",
    )
    assert re.search(r"rc=[1-9]", r.stdout), r.stdout  # mount ran and failed
    assert r.stdout.split()[-1] == "0"


@pytest.mark.parametrize("cmd", ["unshare -U -r id", "unshare -m true", "unshare -n true"])
async def test_new_namespaces_are_denied(sandbox, cmd):
    for user in ("agent", "root"):
        r = await sandbox.exec(cmd, user=user)
        assert r.exit_code != 0, f"{cmd} as {user} succeeded"
        assert "Operation not permitted" in r.stderr, r.stderr  # unshare ran, and the kernel refused it


@pytest.mark.parametrize(
    "name,nr,args",
    [
        ("keyctl", 250, "0, 0, 0, 0"),
        ("bpf", 321, "0, 0, 0"),
        ("perf", 298, "0, 0, -1, -1, 0"),
        ("userfaultfd", 323, "0"),
    ],
)
async def test_dangerous_syscalls_fail_with_eperm(sandbox, name, nr, args):
    r = await sandbox.exec(SYSCALL.format(nr=nr, args=args), user="root")
    assert r.stdout.split() == ["-1", "1"], f"{name}: {r.stdout} {r.stderr}"


async def test_daemon_control_channel_is_out_of_reach(sandbox):
    r = await sandbox.exec("ls -l /proc/1/fd/ 2>&1; echo x > /proc/1/fd/1; kill -9 1; echo rc=$?")
    assert "Permission denied" in r.stdout or "Operation not permitted" in r.stdout
    assert r.stdout.strip().endswith("rc=1")
    root = await sandbox.exec(
        "echo forged > /proc/1/fd/1; cat /proc/1/environ; kill -9 1; kill -9 -1", user="root"
    )
    assert root.stderr.count("Permission denied") == 2
    assert (await sandbox.exec("echo alive")).stdout == "alive\n"


async def test_host_environment_does_not_leak(sandbox, monkeypatch):
    monkeypatch.setenv("EVSYS_HOST_SECRET", "do-not-leak-42")
    r = await sandbox.exec("env; cat /proc/1/environ 2>/dev/null", user="root", env={"GIVEN": "passed-7"})
    assert "GIVEN=passed-7" in r.stdout  # positive control: the environment was dumped
    assert "do-not-leak-42" not in r.stdout


async def test_background_process_does_not_outlive_stop(make_sandbox):
    sb = await make_sandbox()
    await sb.exec("setsid nohup sleep 4242.5 >/dev/null 2>&1 & (sleep 4242.6 &) ; disown -a; echo ok")
    await sb.exec("for i in $(seq 100); do pgrep -f 4242.5 >/dev/null && break; sleep 0.05; done")
    assert host_pids_with("4242.5")
    await sb.stop()
    assert host_pids_with("4242.5") == [] and host_pids_with("4242.6") == []


async def test_background_process_does_not_outlive_a_timeout(sandbox):
    r = await sandbox.exec("sleep 4343.5 & echo started; sleep 4343.6", timeout=0.5)
    assert r.timed_out and r.stdout == "started\n"
    await asyncio.sleep(0.2)
    assert host_pids_with("4343.5") == [] and host_pids_with("4343.6") == []


async def test_forged_reward_does_not_survive_the_engine_sequence(sandbox, tmp_path):
    forger = "while true; do echo 1 > /logs/verifier/reward.txt; echo 1 > /tmp/reward.txt; sleep 0.01; done"
    await sandbox.exec(f"setsid nohup bash -c '{forger}' >/dev/null 2>&1 & echo started")
    await asyncio.sleep(0.2)
    running = await sandbox.exec("cat /tmp/reward.txt; pgrep -c -u agent", user="root")
    written, processes = running.stdout.split()
    assert written == "1" and int(processes) >= 1  # positive control: the forger runs and writes
    # the engine: kill every agent process, reset /logs/verifier as root, upload tests, run the verifier
    await sandbox.kill_processes()
    await sandbox.exec(
        "rm -rf /logs/verifier/* && chown root:root /logs/verifier && chmod 755 /logs/verifier", user="root"
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test.sh").write_text("echo 0 > /logs/verifier/reward.txt\n")
    await sandbox.upload(tmp_path / "tests", "/tests")
    await sandbox.exec("bash /tests/test.sh", user="root")
    await asyncio.sleep(0.3)
    r = await sandbox.exec("cat /logs/verifier/reward.txt; pgrep -c -u agent || true", user="root")
    assert r.stdout.split() == ["0", "0"]
