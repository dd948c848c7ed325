"""A reset sandbox (a slot reused by the next trial) keeps nothing of the previous trial: files anywhere,
/tmp and /dev, processes, IPC objects, lingering connections; and the sandbox's limits still hold."""

from __future__ import annotations

import pytest

from evsys.records import FileCopy, SandboxSpec
from evsys.sandbox import LocalSandbox, SandboxError

MQ = (
    "python3 -c \"import ctypes, os; rt = ctypes.CDLL('librt.so.1', use_errno=True); "
    "fd = rt.mq_open(b'/evsys-q', {flags}, 0o600, None); print(fd, ctypes.get_errno())\""
)


@pytest.fixture
async def sb(tmp_path):
    (tmp_path / "given.txt").write_text("from the task\n")
    box = LocalSandbox(
        SandboxSpec(
            name=f"reset-{tmp_path.name}"[:60],
            files=[FileCopy(src=tmp_path / "given.txt", dst="/app/given.txt")],
        )
    )
    await box.start()
    try:
        yield box
    finally:
        await box.stop()


async def root(sb: LocalSandbox, cmd: str) -> str:
    result = await sb.exec(cmd, user="root")
    assert result.exit_code == 0, result.stderr
    return result.stdout


SNAPSHOT = (
    "cat /etc/passwd /etc/hostname /app/given.txt; ls -A /app /root /tmp /dev /dev/shm /home/agent;"
    "readlink /dev/stdout; stat -c '%n %a %U' /app /tmp /root; test ! -e /opt/left && echo clean"
)


async def test_files_written_changed_or_deleted_anywhere_are_back_to_the_start(sb):
    before = await root(sb, SNAPSHOT)
    await root(
        sb,
        "echo evil >> /etc/passwd; rm /app/given.txt /etc/hostname; echo x > /app/new;"
        "mkdir -p /opt/left/over;"
        "echo t > /tmp/t; echo s > /dev/shm/s;"
        "(echo d > /dev/extra; rm /dev/stdout; ln -s /tmp/x /dev/x) 2>/dev/null;"
        "echo r > /root/.bashrc; chmod 777 /app /tmp",
    )
    await sb.exec("echo mine > /home/agent/mine", user="agent")
    changed = (await sb.exec(SNAPSHOT, user="root")).stdout
    assert "evil" in changed and "mine" in changed  # positive control: the trial's changes are there
    await sb.reset()
    assert await root(sb, SNAPSHOT) == before


async def test_no_process_of_the_previous_trial_survives(sb):
    await root(sb, "sleep 1000 & setsid sleep 1001 & nohup sleep 1002 >/dev/null 2>&1 & true")
    await sb.exec("(sleep 1003 &) ; sleep 1004 & true", user="agent")
    assert (await root(sb, "pgrep -c -f 'sleep 100[0-4]'")).split() == ["5"]  # positive control
    await sb.reset()
    ps = await root(sb, "ps -eo pid=,args=")
    assert "sleep" not in ps
    assert [line.split()[1] for line in ps.splitlines()] == ["/.evsys/daemon/evsysd", "ps"]


async def test_ipc_objects_are_gone(sb):
    await root(sb, "ipcmk -M 4096 && ipcmk -Q && ipcmk -S 2")
    created = await root(sb, MQ.format(flags="os.O_CREAT | os.O_RDWR"))
    assert int(created.split()[0]) >= 0
    assert (await root(sb, "ipcs -m -q -s | grep -c '^0x'")).strip() == "3"  # positive control
    await sb.reset()
    ipcs = await root(sb, "ipcs -m -q -s | grep -c '^0x' || true")
    assert ipcs.strip() == "0"
    reopened = await root(sb, MQ.format(flags="os.O_RDWR"))
    assert reopened.split() == ["-1", "2"]  # ENOENT: the POSIX message queue is gone


async def test_a_lingering_tcp_connection_refuses_the_reset(sb):
    await root(
        sb,
        "python3 -c \"import socket; s = socket.create_server(('127.0.0.1', 8000)); "
        "c = socket.create_connection(('127.0.0.1', 8000)); a, _ = s.accept(); a.close(); c.close()\"",
    )
    with pytest.raises(SandboxError, match="TCP socket"):
        await sb.reset()
    with pytest.raises(SandboxError, match="not running"):
        await sb.exec("true")


async def test_storage_of_the_previous_trial_is_freed(sb):
    usage = sb._cgroup.dirs["memory"] / "memory.usage_in_bytes"
    base = int(usage.read_text())
    await root(sb, "head -c 300000000 /dev/zero > /app/big && head -c 100000000 /dev/zero > /tmp/big")
    assert int(usage.read_text()) > base + 350_000_000
    await sb.reset()
    assert int(usage.read_text()) < base + 50_000_000


async def test_limits_still_hold_after_resets(tmp_path):
    box = LocalSandbox(SandboxSpec(name=f"reset-limits-{tmp_path.name}"[:60], storage_mb=64, pids_max=64))
    await box.start()
    try:
        for _ in range(3):
            await box.reset()
        full = await box.exec("head -c 100000000 /dev/zero > /app/big", user="root")
        assert full.exit_code != 0 and "storage" in full.limits_hit
        forks = await box.exec("for i in $(seq 200); do sleep 5 & done; wait", user="root", timeout=20)
        assert "pids" in forks.limits_hit
        await box.reset()
        assert (await box.exec("df -m /app | tail -1 | awk '{print $2}'")).stdout.strip() == "64"
    finally:
        await box.stop()
