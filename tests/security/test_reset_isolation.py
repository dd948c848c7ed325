"""A reset sandbox (a slot reused by the next trial) keeps nothing of the previous trial: files anywhere,
/tmp and /dev, processes, IPC objects, lingering connections, what pid 1 passes on to every command; its
fingerprint (sandbox_fingerprint.py) is a fresh sandbox's; and the sandbox's limits still hold. Each test runs
twice: the sandbox reset in place, and handed to the next trial through a warm pool."""

from __future__ import annotations

import resource

import pytest
from sandbox_fingerprint import (
    CHANGED_BY_HOSTILE,
    HOSTILE_AGENT,
    HOSTILE_ROOT,
    PARTS,
    differences,
    fingerprint,
)

from evsys.records import FileCopy, SandboxSpec
from evsys.sandbox import LocalSandbox, SandboxError
from evsys.sandbox.pool import Lease, SandboxPool
from evsys.util.tarsafe import tar_of

MQ = (
    "python3 -c \"import ctypes, os; rt = ctypes.CDLL('librt.so.1', use_errno=True); "
    "fd = rt.mq_open(b'/evsys-q', {flags}, 0o600, None); print(fd, ctypes.get_errno())\""
)


class Handover:
    """How the next trial gets a used sandbox: `reset()` in place, or released to a warm pool
    (evsys.sandbox.pool) and acquired again for the next trial of the same spec, as the engine does."""

    def __init__(self, mode: str, spec: SandboxSpec) -> None:
        self.mode = mode
        self.spec = spec
        self.pool = SandboxPool.for_backend("local", max_idle=2, warm=1) if mode == "warm-pool" else None
        self.current: LocalSandbox | None = None
        self.lease: Lease | None = None
        self._trials = 0

    async def start(self) -> LocalSandbox:
        """The first trial's sandbox."""
        if self.pool is None:
            self.current = LocalSandbox(self.spec)
            await self.current.start()
        else:
            self.current = await self._acquire()
        return self.current

    async def _acquire(self) -> LocalSandbox:
        assert self.pool is not None
        self.lease = await self.pool.acquire(self._trial_spec())
        assert isinstance(self.lease.sandbox, LocalSandbox)
        return self.lease.sandbox

    def _trial_spec(self) -> SandboxSpec:
        self._trials += 1
        return self.spec.model_copy(update={"name": f"{self.spec.name}-t{self._trials}"})

    async def next(self, sb: LocalSandbox) -> LocalSandbox:
        """The next trial's sandbox after `sb`'s trial: `sb` itself, reset (SandboxError if it cannot be)."""
        if self.pool is None:
            await sb.reset()
            return sb
        assert self.lease is not None
        await self.lease.release()
        self.current = await self._acquire()
        if self.current is not sb:
            raise SandboxError(f"the pool stopped {sb.spec.name} instead of resetting it")
        assert self.lease.reused  # positive control: the pool handed the used sandbox back, reset
        return sb

    async def close(self) -> None:
        """Stop what is left."""
        if self.pool is not None:
            if self.lease is not None:
                await self.lease.release(reusable=False)
            await self.pool.close()
        elif self.current is not None:
            await self.current.stop()


@pytest.fixture(params=["reset", "warm-pool"])
async def handover(request, tmp_path):
    (tmp_path / "given.txt").write_text("from the task\n")
    spec = SandboxSpec(
        name=f"reset-{tmp_path.name}"[:50],
        files=[FileCopy(src=tmp_path / "given.txt", dst="/app/given.txt")],
    )
    made = Handover(request.param, spec)
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
async def sb(handover):
    return await handover.start()


async def root(sb: LocalSandbox, cmd: str) -> str:
    result = await sb.exec(cmd, user="root")
    assert result.exit_code == 0, result.stderr
    return result.stdout


LOOPBACK_ECHO = (
    "python3 -c \"import socket; s = socket.create_server(('127.0.0.1', 8000)); "
    "c = socket.create_connection(('127.0.0.1', 8000)); print('CONNECTED')\""
)
SNAPSHOT = (
    "cat /etc/passwd /etc/hostname /app/given.txt; ls -A /app /root /tmp /dev /dev/shm /home/agent;"
    "readlink /dev/stdout; stat -c '%n %a %U' /app /tmp /root; test ! -e /opt/left && echo clean"
)


@pytest.mark.needs_sandbox
async def test_files_written_changed_or_deleted_anywhere_are_back_to_the_start(sb, handover):
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
    sb = await handover.next(sb)
    assert await root(sb, SNAPSHOT) == before


@pytest.mark.needs_sandbox
async def test_no_process_of_the_previous_trial_survives(sb, handover):
    await root(sb, "sleep 1000 & setsid sleep 1001 & nohup sleep 1002 >/dev/null 2>&1 & true")
    await sb.exec("(sleep 1003 &) ; sleep 1004 & true", user="agent")
    assert (await root(sb, "pgrep -c -f 'sleep 100[0-4]'")).split() == ["5"]  # positive control
    sb = await handover.next(sb)
    ps = await root(sb, "ps -eo pid=,args=")
    assert "sleep" not in ps
    assert [line.split()[1] for line in ps.splitlines()] == ["/.evsys/daemon/evsysd", "ps"]


@pytest.mark.needs_sandbox
async def test_ipc_objects_are_gone(sb, handover):
    await root(sb, "ipcmk -M 4096 && ipcmk -Q && ipcmk -S 2")
    created = await root(sb, MQ.format(flags="os.O_CREAT | os.O_RDWR"))
    assert int(created.split()[0]) >= 0
    assert (await root(sb, "ipcs -m -q -s | grep -c '^0x'")).strip() == "3"  # positive control
    sb = await handover.next(sb)
    ipcs = await root(sb, "ipcs -m -q -s | grep -c '^0x' || true")
    assert ipcs.strip() == "0"
    reopened = await root(sb, MQ.format(flags="os.O_RDWR"))
    assert reopened.split() == ["-1", "2"]  # ENOENT: the POSIX message queue is gone


@pytest.mark.needs_sandbox
async def test_a_lingering_tcp_connection_is_gone_after_the_reset(sb, handover):
    await root(
        sb,
        "python3 -c \"import socket; s = socket.create_server(('127.0.0.1', 8000)); "
        "c = socket.create_connection(('127.0.0.1', 8000)); a, _ = s.accept(); a.close(); c.close()\"",
    )
    assert "tw 0" not in await root(sb, "grep '^TCP:' /proc/net/sockstat")  # positive control: TIME_WAIT
    sb = await handover.next(sb)
    assert await root(sb, "ss -Htan | wc -l") == "0\n"
    counts = (await root(sb, "grep '^TCP:' /proc/net/sockstat")).split()  # inuse, tw: this namespace's
    assert (counts[counts.index("inuse") + 1], counts[counts.index("tw") + 1]) == ("0", "0")
    assert "CONNECTED" in await root(sb, LOOPBACK_ECHO)  # the next trial's own connections work


@pytest.mark.needs_sandbox
async def test_storage_of_the_previous_trial_is_freed(sb, handover):
    usage = sb._cgroup.dirs["memory"] / "memory.usage_in_bytes"
    base = int(usage.read_text())
    await root(sb, "head -c 300000000 /dev/zero > /app/big && head -c 100000000 /dev/zero > /tmp/big")
    assert int(usage.read_text()) > base + 350_000_000
    sb = await handover.next(sb)
    assert int(usage.read_text()) < base + 50_000_000


@pytest.mark.needs_sandbox
async def test_limits_still_hold_after_resets(handover):
    handover.spec = SandboxSpec(name=f"{handover.spec.name}-limits"[:60], storage_mb=64, pids_max=64)
    box = await handover.start()
    for _ in range(3):
        box = await handover.next(box)
    full = await box.exec("head -c 100000000 /dev/zero > /app/big", user="root")
    assert full.exit_code != 0 and "storage" in full.limits_hit
    forks = await box.exec("for i in $(seq 200); do sleep 5 & done; wait", user="root", timeout=20)
    assert "pids" in forks.limits_hit
    box = await handover.next(box)
    assert (await box.exec("df -m /app | tail -1 | awk '{print $2}'")).stdout.strip() == "64"


@pytest.mark.needs_sandbox
async def test_after_a_hostile_trial_a_reset_sandbox_is_indistinguishable_from_a_fresh_one(sb, handover):
    fresh = await fingerprint(sb)
    async with LocalSandbox(handover.spec.model_copy(update={"name": f"{sb.spec.name}-other"})) as other:
        assert differences(fresh, await fingerprint(other)) == {}  # it tells no two fresh sandboxes apart
    attempts = await root(sb, HOSTILE_ROOT)
    await sb.exec(HOSTILE_AGENT, user="agent")
    changed = differences(fresh, await fingerprint(sb))
    # positive controls: each part the trial can change did change, prlimit works on any process but pid 1
    assert set(changed) == CHANGED_BY_HOSTILE, changed
    assert "oom_score_adj 1000" in changed["pid1"] and "autogroup nice 19" in changed["pid1"]
    assert "prlimit another: 0" in attempts and "prlimit pid 1: 1" in attempts
    assert "prlimit64 pid 1 + 2**32: -1" in attempts
    assert set(PARTS) - CHANGED_BY_HOSTILE >= {"mounts", "names", "inherited", "agent"}
    sb = await handover.next(sb)
    assert differences(fresh, await fingerprint(sb)) == {}


@pytest.mark.needs_sandbox
async def test_a_verification_run_leaves_nothing_a_reset_carries_over(sb, handover, tmp_path):
    """The run seals the sandbox's own /tests (an empty read-only mount); the next trial must not find it."""
    fresh = await fingerprint(sb)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    tests = tar_of(tmp_path / "tests", ".")
    ran = await sb.run_verifier(
        ["/bin/bash", "/tests/test.sh"], tests=tests, output_file="/logs/verifier/out.txt", user="root"
    )
    assert ran.exit_code == 0
    assert "mounts" in differences(fresh, await fingerprint(sb))  # positive control: the seal is there
    sb = await handover.next(sb)
    assert differences(fresh, await fingerprint(sb)) == {}


@pytest.mark.needs_sandbox
async def test_the_next_trials_agent_can_open_a_pty(sb, handover):
    openpty = "python3 -c 'import os; os.openpty(); print(\"pty\")'"
    await root(sb, "chmod 600 /dev/pts/ptmx")
    denied = await sb.exec(openpty, user="agent")
    assert "Permission denied" in denied.stderr  # positive control: root took the ptys from the agent
    sb = await handover.next(sb)
    assert (await sb.exec(openpty, user="agent")).stdout == "pty\n"


@pytest.mark.parametrize("lowered", ["soft", "hard"])
async def test_pid_1s_limits_changed_anyway_are_restored_or_the_sandbox_is_not_reused(sandbox, lowered):
    """As if root inside had lowered pid 1's file size limit past the seccomp filter (here: from the host).
    A soft limit is always put back; a hard one only with CAP_SYS_RESOURCE, else the reset fails."""
    write = "head -c 10000 /dev/zero > /tmp/f && echo wrote"
    limit = (4096, 4096 if lowered == "hard" else resource.RLIM_INFINITY)
    resource.prlimit(sandbox._daemon_pid(), resource.RLIMIT_FSIZE, limit)
    denied = await sandbox.exec(write)
    assert "File size limit exceeded" in denied.stderr  # positive control: pid 1's commands inherit it
    try:
        await sandbox.reset()
    except SandboxError as exc:
        assert lowered == "hard" and "RLIMIT_FSIZE" in str(exc)
        with pytest.raises(SandboxError, match="not running"):
            await sandbox.exec("true")
    else:
        assert (await sandbox.exec(write)).stdout == "wrote\n"
