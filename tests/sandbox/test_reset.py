"""reset() and the pool's reuse policy: a reset sandbox works like a new one, repeated resets leak nothing,
the pool reuses only sandboxes of an equal spec and stops what it cannot reset."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sandbox_helpers import note_preexisting, own_cgroup_dirs, sandbox_mounts, sandbox_processes, spec

from evsys.records import Bind
from evsys.sandbox import LocalSandbox, SandboxError
from evsys.sandbox.local import cgsetup
from evsys.sandbox.pool import ReusePolicy, SandboxPool, WarmPolicy


@pytest.fixture(autouse=True)
def _only_this_tests_sandboxes():
    """Leak checks judge the sandboxes a test starts, not ones an earlier test left (those are warned of)."""
    note_preexisting()


async def test_every_way_of_running_commands_works_after_a_reset(sandbox):
    for _ in range(2):
        await sandbox.exec("true; ls /; echo x > /app/x; cat /app/x")  # workers and fast shells exist
        await sandbox.reset()
        assert (await sandbox.exec("echo hi")).stdout == "hi\n"  # fork-free builtins
        assert (await sandbox.exec("cat", stdin=b"in")).stdout == "in"  # forked with stdin
        for _ in range(3):  # past the first two forked commands: the worker path
            assert (await sandbox.exec("id -un; pwd; ls /app")).stdout == "agent\n/app\n"
        assert (await sandbox.exec("id -un", user="root")).stdout == "root\n"
        proc = await sandbox.spawn(["cat"], stdin=b"streamed")
        proc.stdin.close()
        assert await asyncio.wait_for(proc.stdout.read(), 10) == b"streamed"
        assert await proc.wait() == 0
        await sandbox.files(mkdir=["/app/d"])
        assert (await sandbox.exec("ls -d /app/d")).stdout == "/app/d\n"


@pytest.mark.needs_sandbox
async def test_binds_stay_and_stay_read_only(tmp_path):
    (tmp_path / "shared.txt").write_text("host data\n")
    sb = LocalSandbox(spec(binds=[Bind(src=tmp_path, dst="/data", read_only=True)]))
    await sb.start()
    try:
        await sb.reset()
        assert (await sb.exec("cat /data/shared.txt", user="root")).stdout == "host data\n"
        denied = await sb.exec("echo x > /data/shared.txt", user="root")
        assert denied.exit_code != 0 and "Read-only" in denied.stderr
    finally:
        await sb.stop()
    assert (tmp_path / "shared.txt").read_text() == "host data\n"


@pytest.mark.needs_sandbox
@pytest.mark.slow
async def test_100_resets_leave_no_mount_or_process_behind():
    sb = LocalSandbox(spec())
    await sb.start()
    try:
        ns_mounts = Path(f"/proc/{sb._proc.pid}/mountinfo")
        await sb.reset()
        after_first = len(ns_mounts.read_bytes().splitlines())  # noqa: ASYNC240
        for i in range(100):
            await sb.exec(f"echo {i} > /app/f; sleep 100 & setsid sleep 100 &")
            await sb.reset()
        assert len(ns_mounts.read_bytes().splitlines()) == after_first  # noqa: ASYNC240
        scopes = cgsetup.daemon_arguments(sb._cgroup)  # its cgroup files (the agent's, the verifier's)
        daemon = " ".join([f"/.evsys/daemon/evsysd {sb.agent_uid}", *scopes])
        assert (await sb.exec("ls -A /app; ps -eo args=")).stdout == f"{daemon}\nps -eo args=\n"
    finally:
        await sb.stop()
    assert sandbox_mounts() == []
    assert sandbox_processes() == []
    assert own_cgroup_dirs() == []


@pytest.mark.needs_sandbox
async def test_reset_needs_a_running_sandbox():
    sb = LocalSandbox(spec())
    with pytest.raises(SandboxError, match="not running"):
        await sb.reset()


def test_the_pool_key_ignores_the_name_only_and_each_policy_names_the_specs_it_keeps():
    reuse_key, warm_key = ReusePolicy().admits.key, WarmPolicy().admits.key
    assert spec().pool_key() == spec(name="other").pool_key() == reuse_key(spec())
    assert spec().pool_key() != spec(memory_mb=512).pool_key()
    assert spec().pool_key() != spec(env={"A": "1"}).pool_key()
    # every network mode is reused (a reset gives the network a fresh state too), each with its own kind
    assert None not in {reuse_key(spec(network="public")), reuse_key(spec(network="allowlist"))}
    assert reuse_key(spec(network="public")) != reuse_key(spec())
    # an allowlist's hosts are resolved when it starts: never started ahead (warm)
    assert warm_key(spec(network="allowlist")) is None and warm_key(spec(network="public")) is not None


@pytest.mark.needs_sandbox
async def test_pool_reuses_sandboxes_of_an_equal_spec_only():
    pool = SandboxPool(LocalSandbox, reuse=ReusePolicy(max_idle=2))
    try:
        first = await pool.acquire(spec())
        await first.sandbox.exec("echo left > /app/left")
        await first.release()
        second = await pool.acquire(spec())
        assert second.sandbox is first.sandbox and second.reused
        assert (await second.sandbox.exec("ls -A /app")).stdout == ""
        other = await pool.acquire(spec(memory_mb=256))
        assert other.sandbox is not first.sandbox and not other.reused
        await asyncio.gather(second.release(), other.release())
        assert pool.idle_count == 2
        third = await pool.acquire(spec())
        await third.release(reusable=False)  # e.g. its trial was cancelled: stopped, not kept
        assert pool.idle_count == 1
        assert (pool.started, pool.reused) == (2, 2)
    finally:
        await pool.close()
    assert pool.idle_count == 0
    assert sandbox_processes() == []
    assert own_cgroup_dirs() == []


async def refused_reset() -> None:
    """A reset the sandbox refuses (as when a process survives SIGKILL)."""
    raise SandboxError("refused")


@pytest.mark.needs_sandbox
async def test_pool_stops_a_sandbox_it_cannot_reset_and_caps_idle_ones():
    pool = SandboxPool(LocalSandbox, reuse=ReusePolicy(max_idle=1))
    try:
        leases = [await pool.acquire(spec()) for _ in range(3)]
        await leases[0].sandbox.exec("sleep 1000 &")
        leases[0].sandbox.reset = refused_reset  # type: ignore[method-assign]
        for lease in leases:
            await lease.release()
        assert pool.idle_count == 1  # one refused, one kept, one over the cap
        with pytest.raises(SandboxError, match="not running"):  # stopped
            await leases[0].sandbox.exec("true")
        kept = await pool.acquire(spec())
        assert kept.sandbox is leases[1].sandbox
        await kept.release()
    finally:
        await pool.close()
    assert sandbox_processes() == []
    assert own_cgroup_dirs() == []


@pytest.mark.needs_sandbox
async def test_close_waits_for_a_release_in_flight():
    pool = SandboxPool(LocalSandbox, reuse=ReusePolicy(max_idle=2))
    lease = await pool.acquire(spec())
    releasing = asyncio.create_task(lease.release())
    await asyncio.sleep(0)  # the release is under way (resetting)
    await pool.close()
    assert releasing.done() and pool.idle_count == 0
    assert sandbox_processes() == []
    assert own_cgroup_dirs() == []


@pytest.mark.needs_sandbox
async def test_a_burst_of_releases_keeps_max_idle_and_stops_the_rest():
    """Releases at once (the end of a wave of trials) each see the others' resets in flight: the pool resets
    and keeps `max_idle` of them and stops the rest instead of resetting every one."""
    pool = SandboxPool(LocalSandbox, reuse=ReusePolicy(max_idle=2))
    try:
        leases = await asyncio.gather(*(pool.acquire(spec()) for _ in range(5)))
        await asyncio.gather(*(lease.release() for lease in leases))
        assert pool.idle_count == 2
        assert sum(lease.sandbox.agent_uid is not None for lease in leases) == 2  # the other three stopped
    finally:
        await pool.close()
    assert sandbox_processes() == []


@pytest.mark.needs_sandbox
async def test_no_sandbox_is_reset_for_trials_that_will_not_come():
    """With `demand` (a job's trials not started yet) a released sandbox nobody can take any more is stopped
    rather than reset: the last wave of a job resets nothing."""
    left = {"trials": 1}
    pool = SandboxPool(LocalSandbox, reuse=ReusePolicy(max_idle=4, demand=lambda: left["trials"]))
    try:
        leases = await asyncio.gather(*(pool.acquire(spec()) for _ in range(3)))
        await asyncio.gather(*(lease.release() for lease in leases))
        assert pool.idle_count == 1  # one more trial to come: one kept for it
        left["trials"] = 0
        again = await pool.acquire(spec())
        assert again.reused
        await again.release()
        assert pool.idle_count == 0 and again.sandbox.agent_uid is None  # no trial left: stopped, not reset
    finally:
        await pool.close()
    assert sandbox_processes() == []


async def test_a_reset_helper_that_exits_without_reporting_success_fails_the_reset(sandbox, monkeypatch):
    """The helper is started by the spawner, which reaps it: its exit status never reaches evsys, so only its
    own SUCCESS report counts. A helper that exits 0 without it (here `true`) is a failed reset."""
    from evsys.sandbox.local import reset

    await sandbox.reset()  # positive control: the real helper reports success
    monkeypatch.setattr(reset.ResetTarget, "argv", lambda self, kept_userns=False: ["/bin/true"])
    with pytest.raises(SandboxError, match="exited without reporting success"):
        await sandbox.reset()
