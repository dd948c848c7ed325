"""The warm policy of the pool (evsys.sandbox.pool.warm): N started sandboxes per spec ready ahead of
demand, handed over as started, bounded by memory, stopped when idle and when the pool closes (nothing left
running or mounted)."""

from __future__ import annotations

import pytest
from sandbox_helpers import note_preexisting, own_cgroup_dirs, sandbox_mounts, sandbox_processes, spec

from evsys.sandbox.pool import WARM_SANDBOX_MB, SandboxPool, WarmPoolError, fit_warm_count


def running() -> int:
    """Sandboxes of this process that exist now (one cgroup name each)."""
    return len({path.name for path in own_cgroup_dirs()})


@pytest.fixture
def leak_probe():
    note_preexisting()
    yield
    assert sandbox_processes() == [] and sandbox_mounts() == [] and own_cgroup_dirs() == []


@pytest.mark.needs_sandbox
async def test_a_spec_asked_for_once_has_warm_sandboxes_ready_for_the_next_trials(leak_probe, eventually):
    pool = SandboxPool.for_backend("local", max_idle=4, warm=2)
    try:
        first = await pool.acquire(spec(name="warm-first"))
        await eventually(lambda: pool.idle_count == 2, "two warm sandboxes ready")
        assert running() == 3  # the trial's and two warm ones
        second = await pool.acquire(spec(name="warm-second"))
        assert second.sandbox is not first.sandbox and not second.reused
        assert second.sandbox.spec.name == "warm-second"  # handed over under the trial's name
        assert (await second.sandbox.exec("echo $HOSTNAME; ls -A /tmp")).stdout.split()  # runs as started
        await eventually(lambda: pool.idle_count == 2, "the pool refilled")
        other = await pool.acquire(spec(name="warm-other", memory_mb=300))  # another spec: its own warm ones
        await eventually(lambda: pool.idle_count == 4, "the other spec kept warm too")
        for lease in (first, second, other):
            await lease.release()
    finally:
        await pool.close()
    assert pool.idle_count == 0


@pytest.mark.needs_sandbox
async def test_prewarm_starts_them_before_the_first_trial_and_idle_ones_are_stopped(leak_probe, eventually):
    pool = SandboxPool.for_backend("local", max_idle=0, warm=2, idle_timeout_sec=0.5)
    try:
        pool.prewarm(spec(name="prewarmed"))
        await eventually(lambda: pool.idle_count == 2, "prewarmed")
        assert running() == 2
        await eventually(lambda: pool.idle_count == 0, "idle warm sandboxes stopped")
        await eventually(lambda: running() == 0 and sandbox_processes() == [], "their processes gone")
    finally:
        await pool.close()


@pytest.mark.needs_sandbox
async def test_closing_while_warm_sandboxes_start_leaves_nothing_running(leak_probe, eventually):
    pool = SandboxPool.for_backend("local", max_idle=4, warm=6)
    trial = await pool.acquire(spec(name="warm-close"))
    await eventually(lambda: pool.started >= 2, "warm sandboxes starting")
    await trial.release()
    await pool.close()  # some of the six are still starting: they are stopped too


def test_the_count_shrinks_to_what_the_memory_holds_and_is_refused_when_none_fits():
    assert fit_warm_count(8, available=10_000) == (8, None)
    kept, why = fit_warm_count(8, available=8 * WARM_SANDBOX_MB)
    assert (
        kept == 4 and "keeping 4 per environment" in why and f"{8 * WARM_SANDBOX_MB} MiB are available" in why
    )
    with pytest.raises(WarmPoolError, match="cannot keep warm sandboxes"):
        fit_warm_count(8, available=1)
