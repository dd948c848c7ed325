"""start/stop: many sandboxes at once, repeated cycles leaving nothing behind, stale cleanup, bad specs."""

# ruff: noqa: ASYNC230 - tiny host-side probes of what the sandbox may have touched

from __future__ import annotations

import asyncio
import os

import pytest
from sandbox_helpers import note_preexisting, own_cgroup_dirs, sandbox_mounts, sandbox_processes, spec

from evsys.sandbox import LocalSandbox, SandboxError, SandboxUnsupported, create_sandbox
from evsys.sandbox.local import cgsetup
from evsys.sandbox.local.cgroups import detect_layout


@pytest.fixture(autouse=True)
def _only_this_tests_sandboxes():
    """Leak checks judge the sandboxes a test starts, not ones an earlier test left (those are warned of)."""
    note_preexisting()


@pytest.mark.needs_sandbox
async def test_32_sandboxes_at_once():
    boxes = [LocalSandbox(spec()) for _ in range(32)]
    await asyncio.gather(*(b.start() for b in boxes))
    try:
        results = await asyncio.gather(
            *(b.exec(f"echo {i} > /app/me; cat /app/me") for i, b in enumerate(boxes))
        )
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(32)]
    finally:
        await asyncio.gather(*(b.stop() for b in boxes))
    assert own_cgroup_dirs() == []


@pytest.mark.needs_sandbox
@pytest.mark.slow
async def test_100_start_stop_cycles_leave_nothing_behind():
    mounts_before = open("/proc/self/mountinfo").read()
    for _ in range(100):
        sb = LocalSandbox(spec())
        await sb.start()
        await sb.exec("sleep 100 & setsid sleep 100 & echo x > /app/f")
        await sb.stop()
    assert open("/proc/self/mountinfo").read() == mounts_before
    assert sandbox_mounts() == []
    assert own_cgroup_dirs() == []
    assert sandbox_processes() == []


async def test_stop_is_idempotent_and_exec_after_stop_fails(sandbox):
    await sandbox.stop()
    await sandbox.stop()
    with pytest.raises(SandboxError, match="not running"):
        await sandbox.exec("true")


async def test_cannot_start_twice(sandbox):
    with pytest.raises(SandboxError, match="already started"):
        await sandbox.start()


@pytest.mark.needs_sandbox
async def test_unknown_backend_and_bad_default_user():
    with pytest.raises(SandboxUnsupported, match="unknown sandbox backend 'no-such-backend'"):
        create_sandbox(spec(), backend="no-such-backend")
    with pytest.raises(SandboxError, match=r"spec\.user must be one of"):
        await LocalSandbox(spec(user="admin")).start()


def test_cleanup_stale_removes_cgroups_of_dead_owners():
    dead = 2**22 - 7  # above the default pid_max range used here, so no such process
    assert not os.path.exists(f"/proc/{dead}")
    layout = detect_layout()
    dirs = [parent / f"evsys-{dead}-leftover" for parent in layout.parents.values()]
    live = [parent / f"evsys-{os.getpid()}-inuse" for parent in layout.parents.values()]
    for d in dirs + live:
        d.mkdir(exist_ok=True)
    try:
        assert asyncio.run(LocalSandbox.cleanup_stale()) >= 1
        assert not any(d.exists() for d in dirs)
        assert all(d.exists() for d in live)
    finally:
        for d in dirs + live:
            if d.exists():
                d.rmdir()


@pytest.mark.needs_sandbox
async def test_limits_are_written_to_the_sandbox_cgroups():
    async with LocalSandbox(spec(cpus=0.5, memory_mb=256, pids_max=77)) as sb:
        dirs = sb._cgroup.dirs
        mb = 1024 * 1024
        if sb._cgroup.layout.version == 1:
            assert (dirs["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "50000"
            # the agent's processes get the asked limit; the sandbox's cgroup holds the reserve too
            assert (dirs["memory"] / "agent" / "memory.limit_in_bytes").read_text().strip() == str(256 * mb)
            assert (dirs["memory"] / "memory.limit_in_bytes").read_text().strip() == str((256 + 128) * mb)
        assert (dirs["pids"] / "agent" / "pids.max").read_text().strip() == "77"
        assert (dirs["pids"] / "pids.max").read_text().strip() == str(77 + cgsetup.PIDS_RESERVE)
        r = await sb.exec("cat /proc/self/cgroup")
        assert r.exit_code == 0
        [pids_line] = [line for line in r.stdout.splitlines() if ":pids:" in line]
        assert pids_line.endswith("/agent"), r.stdout  # the command runs in the agent's cgroup
        in_cgroup = set(sb._cgroup.pids())
        assert len(in_cgroup) >= 2  # the daemon and at least one worker are inside the limits
        machinery = (dirs["pids"] / "machinery" / "cgroup.procs").read_text().split()
        assert len(machinery) == 2  # bubblewrap and the daemon, outside the agent's limits
        out = "/logs/verifier/cgroup.txt"  # a verification run is in cgroups of its own
        await sb.run_verifier(["cat", "/proc/self/cgroup"], tests=b"", output_file=out, user="root")
        [pids_line] = [line for line in (await sb.read_file(out)).decode().splitlines() if ":pids:" in line]
        assert pids_line.endswith("/verifier")


@pytest.mark.needs_sandbox
async def test_public_network_has_its_own_namespace_behind_slirp_and_no_network_has_only_lo():
    async with LocalSandbox(spec(network="public")) as sb:
        out = await sb.exec("ip -o -4 addr show tap0 | awk '{print $4}'; ip route; cat /etc/resolv.conf")
        assert out.stdout.splitlines() == [
            "10.0.2.100/24",
            "default via 10.0.2.2 dev tap0 ",
            "10.0.2.0/24 dev tap0 proto kernel scope link src 10.0.2.100 ",
            "nameserver 10.0.2.3",
        ]
        slirp = sb._network.pid
        assert os.path.exists(f"/proc/{slirp}")  # noqa: ASYNC240
    assert not os.path.exists(f"/proc/{slirp}")  # noqa: ASYNC240 - stopped with the sandbox
    async with LocalSandbox(spec()) as sb:
        links = (
            await sb.exec("ip -o link | cut -d: -f2; test -e /etc/resolv.conf || echo no-resolv")
        ).stdout.split()
        assert links == ["lo", "no-resolv"]


@pytest.mark.needs_sandbox
async def test_public_network_without_slirp4netns_is_a_clear_error(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda *a, **k: None)
    with pytest.raises(SandboxError, match="apt-get install slirp4netns"):
        await LocalSandbox(spec(network="public")).start()
    assert own_cgroup_dirs() == []


@pytest.mark.needs_sandbox
async def test_a_failed_mount_setup_is_reported_and_leaves_nothing(monkeypatch, tmp_path):
    real = LocalSandbox._prepare_layers

    def missing_layer(self, cache, agent_uid):
        lowers, daemon = real(self, cache, agent_uid)
        return [str(tmp_path / "no-such-layer"), *lowers], daemon

    monkeypatch.setattr(LocalSandbox, "_prepare_layers", missing_layer)
    sb = LocalSandbox(spec())
    with pytest.raises(
        SandboxError,
        match=r"cannot set up the sandbox: cannot make idmapped layers .* of .*no-such-layer.*: No such",
    ):
        await sb.start()
    assert own_cgroup_dirs() == []
    assert sandbox_processes() == []
    await sb.stop()  # still idempotent after a failed start
