"""The sandbox pool's invariants, checked by a state machine (hypothesis.stateful) that drives the one pool
the way the engine does (`SandboxPool.acquire(spec) -> Lease`, `lease.release(...)`) with random sequences of
acquires (two specs), releases (kept or not, waited for or reset in the background, twice), acquires
cancelled while they wait, starts and resets finishing or failing in any order, and close, against an
in-memory backend (fake_pool_backend.py), for each way the pool keeps sandboxes (reuse, reuse bounded by
demand, warm, shared places). After every step:

- no sandbox (shared: no place in one) is handed to two holders at once;
- a sandbox handed out again was reset after its last trial, and the reset had finished;
- the pool keeps no more sandboxes than `max_idle` (plus the acquires waiting and the warm ones), and keeps
  none when no trial is left to take it (`demand`);
- after close (and the holders giving back what they had), every sandbox started is stopped.

The last tests prove the machine can fail: it catches a pool that skips the reset, one that hands an idle
sandbox out twice, one that keeps every sandbox released, one whose close leaves idle ones running, and a
shared pool that hands a place out twice."""

from __future__ import annotations

import asyncio
import itertools
import re

import pytest
from fake_pool_backend import FakeSandbox, World
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from evsys.records import SandboxSpec
from evsys.sandbox.base import SandboxError
from evsys.sandbox.pool import Lease, ReusePolicy, SandboxPool, SharePolicy, WarmPolicy
from evsys.sandbox.pool.reuse import IdleSandboxes
from evsys.sandbox.pool.shared import SharedBox, SharedSandboxes

SPECS = (SandboxSpec(name="a"), SandboxSpec(name="b", memory_mb=256))
SETTINGS = settings(
    max_examples=60,
    stateful_step_count=50,
    deadline=None,
    database=None,  # nothing written into the working tree
    suppress_health_check=[HealthCheck.too_slow],
)


class PoolMachine(RuleBasedStateMachine):
    """Drives one pool through a trainer's or a job's life; subclasses set how it keeps sandboxes."""

    max_idle = 2
    warm = 0
    with_demand = False

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.world = World()
        self.remaining = 0  # acquires still to come (the pool's `demand`, when it has one)
        self.pool = self.make_pool()
        self.acquiring: list[asyncio.Task] = []
        self.held: list[Lease] = []
        self.released: list[Lease] = []
        self.releasing: list[asyncio.Task] = []
        self.names = itertools.count()

    def make_pool(self) -> SandboxPool:
        """The pool under test: whole sandboxes, reset and kept (and warm ones)."""
        demand = (lambda: self.remaining) if self.with_demand else None
        reuse = ReusePolicy(max_idle=self.max_idle, demand=demand)
        return SandboxPool(self.world.factory, reuse=reuse, warm=WarmPolicy(count=self.warm))

    def idle_bound(self) -> int:
        """How many sandboxes no holder has the pool may keep running now."""
        return self.max_idle + len(self.acquiring) + self.warm * len(SPECS)

    def let_go(self, lease: Lease) -> None:
        """The holder of `lease` no longer uses it."""
        assert isinstance(lease.sandbox, FakeSandbox)
        lease.sandbox.held = False

    # ------------------------------------------------------------------ driving the loop
    def spin(self, rounds: int = 40) -> None:
        """Let every task run until it waits on a gate (or is done)."""
        self.loop.run_until_complete(_yield(rounds))
        self.harvest()

    def harvest(self) -> None:
        """Hand the finished acquires' leases to their holders, checking each handover."""
        for task in [t for t in self.acquiring if t.done()]:
            self.acquiring.remove(task)
            if task.cancelled():
                continue
            if isinstance(task.exception(), SandboxError):  # its start failed: nothing to hold
                continue
            self.hand_over(task.result())
        for task in [t for t in self.releasing if t.done()]:
            self.releasing.remove(task)
            if not task.cancelled() and task.exception() is not None:
                self.world.violation(f"a release failed: {task.exception()!r}")

    def hand_over(self, lease: Lease) -> None:
        sandbox = lease.sandbox
        assert isinstance(sandbox, FakeSandbox)
        assert not sandbox.held, f"{sandbox.spec.name} handed to two holders at once"
        assert sandbox.state == "running", f"{sandbox.spec.name} handed out while {sandbox.state}"
        assert not sandbox.dirty, f"{sandbox.spec.name} handed out again, not reset since its last trial"
        sandbox.held = sandbox.dirty = True  # its trial runs in it
        self.held.append(lease)

    # ------------------------------------------------------------------ rules
    @rule(n=st.integers(1, 3))
    def plan(self, n: int) -> None:
        """More trials are to come (what a job's `demand` counts)."""
        self.remaining += n

    @rule(spec=st.sampled_from(SPECS))
    def acquire(self, spec: SandboxSpec) -> None:
        self.remaining = max(0, self.remaining - 1)
        name = spec.model_copy(update={"name": f"{spec.name}-{next(self.names)}"})
        self.acquiring.append(self.loop.create_task(self.pool.acquire(name)))
        self.spin()

    @precondition(lambda self: self.world.gates)
    @rule(data=st.data(), ok=st.sampled_from([True, True, True, False]))
    def finish(self, data: st.DataObject, ok: bool) -> None:
        """A start or reset waiting at its gate finishes (or fails)."""
        data.draw(st.sampled_from(self.world.gates)).open(ok)
        self.spin()

    @precondition(lambda self: self.acquiring)
    @rule(data=st.data())
    def cancel_acquire(self, data: st.DataObject) -> None:
        """A trial waiting for its sandbox is cancelled."""
        data.draw(st.sampled_from(self.acquiring)).cancel()
        self.spin()

    @precondition(lambda self: self.held)
    @rule(data=st.data(), reusable=st.booleans(), wait=st.booleans())
    def release(self, data: st.DataObject, reusable: bool, wait: bool) -> None:
        lease = data.draw(st.sampled_from(self.held))
        self.held.remove(lease)
        self.released.append(lease)
        sandbox = lease.sandbox
        self.let_go(lease)
        if self.with_demand and self.remaining == 0 and not self.acquiring:
            self.world.must_not_keep.add(id(sandbox))  # no trial left to take it: stopped, never reset
        self.releasing.append(self.loop.create_task(lease.release(reusable=reusable, wait=wait)))
        self.spin()

    @precondition(lambda self: self.released)
    @rule(data=st.data())
    def release_again(self, data: st.DataObject) -> None:
        """A holder gives back a lease it gave back already (a no-op, never a second handover)."""
        lease = data.draw(st.sampled_from(self.released))
        self.releasing.append(self.loop.create_task(lease.release()))
        self.spin()

    # ------------------------------------------------------------------ invariants
    @invariant()
    def nothing_the_pool_must_never_do(self) -> None:
        assert self.world.violations == []

    @invariant()
    def idle_sandboxes_are_bounded(self) -> None:
        # a reset in flight is not counted: when it lands the pool keeps the sandbox only within the bound
        # (else stops it) and the next check sees it settled; an acquire cancelled while it waited for that
        # reset leaves it running until then
        idle = [
            sb
            for sb in self.world.sandboxes
            if sb.alive and sb.state not in ("starting", "resetting") and not sb.held
        ]
        bound = self.idle_bound()
        assert len(idle) <= bound, f"{len(idle)} idle sandboxes kept, more than {bound}"

    def close_and_check(self) -> None:
        """Close the pool; the acquires in flight end and their holders give back what they got, as a
        job's trials do when it ends; then nothing may be left running."""
        self.world.closing = True
        self.world.open_all()
        self.loop.run_until_complete(self.pool.close())
        self.loop.run_until_complete(_settled(self.acquiring))
        self.harvest()
        for lease in self.held:
            self.let_go(lease)
            self.releasing.append(self.loop.create_task(lease.release()))
        self.held.clear()
        self.loop.run_until_complete(_settled(self.releasing))
        self.harvest()
        left = [sb.spec.name for sb in self.world.sandboxes if sb.alive]
        assert left == [], f"left running after close: {left}"
        assert self.world.violations == []

        with pytest.raises(SandboxError, match="closed"):  # and a closed pool starts nothing more
            self.loop.run_until_complete(self.pool.acquire(SPECS[0]))

    def teardown(self) -> None:
        """Every run ends with the pool closed (a job's end, a trainer's last step)."""
        try:
            self.close_and_check()
        finally:
            self.loop.close()


async def _yield(rounds: int) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


async def _settled(tasks: list[asyncio.Task]) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)


class KeepingTwo(PoolMachine):
    """A trainer's pool: up to two reset sandboxes kept between steps."""


class KeepingForDemand(PoolMachine):
    """A job's pool: sandboxes kept only while trials not started yet may take them."""

    max_idle = 3
    with_demand = True


class KeepingWarm(PoolMachine):
    """A pool keeping one started sandbox per spec ready ahead of demand beside one reset one."""

    max_idle = 1
    warm = 1


class SharingPlaces(PoolMachine):
    """A pool whose leases are places in shared sandboxes (two each, at most two sandboxes, the slot API's
    shared slots): no place is handed to two holders, a sandbox is stopped only once no place of it is held
    (a place given back as not reusable marks it broken), and close stops everything."""

    def __init__(self) -> None:
        self.places: set[tuple[int, int | None]] = set()  # (id(sandbox), place) held now
        super().__init__()

    def make_pool(self) -> SandboxPool:
        return SandboxPool(self.world.factory, share=SharePolicy(slots_per_sandbox=2), max_sandboxes=2)

    def idle_bound(self) -> int:
        return 2  # max_sandboxes: idle shared sandboxes stay until their idle timeout

    def hand_over(self, lease: Lease) -> None:
        sandbox = lease.sandbox
        assert isinstance(sandbox, FakeSandbox)
        assert sandbox.state == "running", f"{sandbox.spec.name} handed out while {sandbox.state}"
        place = (id(sandbox), lease.place)
        assert lease.place is not None and place not in self.places, "a place handed to two holders at once"
        self.places.add(place)
        sandbox.held = True
        self.held.append(lease)

    def let_go(self, lease: Lease) -> None:
        assert isinstance(lease.sandbox, FakeSandbox)
        self.places.discard((id(lease.sandbox), lease.place))
        lease.sandbox.held = any(box == id(lease.sandbox) for box, _ in self.places)


@pytest.mark.parametrize("machine", [KeepingTwo, KeepingForDemand, KeepingWarm, SharingPlaces])
def test_the_pool_keeps_its_invariants(machine):
    run_state_machine_as_test(machine, settings=SETTINGS)


def _faulty_run(machine: type[PoolMachine]) -> AssertionError:
    with pytest.raises(AssertionError) as caught:
        run_state_machine_as_test(
            machine, settings=settings(SETTINGS, max_examples=300, phases=[Phase.generate])
        )
    return caught.value


def test_it_catches_a_pool_that_skips_the_reset(monkeypatch):
    async def kept_unreset(self: IdleSandboxes, sandbox, key: str) -> bool:
        self._resetting -= 1
        self._idle.setdefault(key, []).append(sandbox)
        return True

    monkeypatch.setattr(IdleSandboxes, "_reset_into_idle", kept_unreset)
    assert "not reset since its last trial" in str(_faulty_run(KeepingTwo))


def test_it_catches_a_pool_that_hands_a_sandbox_out_twice(monkeypatch):
    take = IdleSandboxes.take

    def take_and_keep(self: IdleSandboxes, spec: SandboxSpec, key: str | None):
        sandbox = take(self, spec, key)
        if sandbox is not None:
            self._idle[key or ""].append(sandbox)  # still idle: the next acquire gets it as well
        return sandbox

    monkeypatch.setattr(IdleSandboxes, "take", take_and_keep)
    # caught as a second holder, or as a holder getting it while its first holder's release resets or stops it
    assert re.search(
        "handed to two holders at once|handed out while (resetting|stopped)", str(_faulty_run(KeepingTwo))
    )


def test_it_catches_a_pool_that_keeps_every_sandbox_released(monkeypatch):
    has_room = IdleSandboxes._has_room

    def unbounded(self: IdleSandboxes, sandbox, key: str | None, reusable: bool) -> bool:
        policy, self.policy = self.policy, ReusePolicy(max_idle=10**6)
        try:
            return has_room(self, sandbox, key, reusable)
        finally:
            self.policy = policy

    monkeypatch.setattr(IdleSandboxes, "_has_room", unbounded)
    failure = str(_faulty_run(KeepingForDemand))
    assert re.search("idle sandboxes kept, more than|no trial was left to take it", failure), failure


def test_it_catches_a_pool_whose_close_leaves_idle_sandboxes_running(monkeypatch):
    close = IdleSandboxes.close

    async def close_keeping_idle(self: IdleSandboxes) -> None:
        self._idle.clear()  # forgotten, not stopped
        await close(self)

    monkeypatch.setattr(IdleSandboxes, "close", close_keeping_idle)
    assert "left running after close" in str(_faulty_run(KeepingTwo))


def test_it_catches_a_shared_pool_that_hands_a_place_out_twice(monkeypatch):
    take = SharedSandboxes._take_place

    def take_and_keep(self: SharedSandboxes, box: SharedBox) -> Lease:
        lease = take(self, box)
        box.free.insert(0, lease.place or 0)  # still free: the next holder gets it as well
        return lease

    monkeypatch.setattr(SharedSandboxes, "_take_place", take_and_keep)
    # caught as a second holder of the place, or as the sandbox counted idle (its places all "free") and
    # stopped under its holders
    failure = str(_faulty_run(SharingPlaces))
    assert re.search(
        "a place handed to two holders at once|handed out while stopped|stopped while a holder", failure
    )
