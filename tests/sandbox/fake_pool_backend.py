"""An in-memory sandbox backend for driving the sandbox pool (test_pool_state_machine.py): `FakeSandbox`
counts its starts, resets and stops, and each start and reset waits at a `Gates` entry until the test lets
it finish (or fail), so a test chooses the interleaving. What the pool must never do is written down as a
violation in the `World` the sandboxes share: a reset or stop of a sandbox a holder still has, a reset of
one the demand rules said to stop, any operation on a stopped sandbox."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from evsys.records import ExecResult, SandboxSpec
from evsys.sandbox.base import Capability, Sandbox, SandboxError


@dataclass
class Gate:
    """One start or reset waiting to finish: `open(True)` lets it succeed, `open(False)` fail."""

    op: str
    sandbox: FakeSandbox
    future: asyncio.Future

    def open(self, ok: bool) -> None:
        """Let the operation finish (a no-op once it did or was cancelled)."""
        if not self.future.done():
            self.future.set_result(ok)


@dataclass
class World:
    """Every fake sandbox made, the operations waiting, and the pool's violations so far."""

    sandboxes: list[FakeSandbox] = field(default_factory=list)
    gates: list[Gate] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    must_not_keep: set[int] = field(default_factory=set)  # ids of sandboxes released with no demand left
    closing: bool = False
    auto: bool = False  # operations finish at once (closing: nothing waits for the test any more)

    def factory(self, spec: SandboxSpec) -> FakeSandbox:
        """What the pool starts sandboxes with."""
        sandbox = FakeSandbox(spec, self)
        self.sandboxes.append(sandbox)
        return sandbox

    async def wait(self, op: str, sandbox: FakeSandbox) -> None:
        """Wait until the test opens this operation's gate; SandboxError when it opens it as a failure."""
        if self.auto:
            await asyncio.sleep(0)
            return
        gate = Gate(op, sandbox, asyncio.get_running_loop().create_future())
        self.gates.append(gate)
        try:
            ok = await gate.future
        finally:
            self.gates.remove(gate)
        if not ok:
            raise SandboxError(f"{sandbox.spec.name}: {op} failed")

    def open_all(self) -> None:
        """Let every waiting operation succeed, and every later one finish at once."""
        self.auto = True
        for gate in list(self.gates):
            gate.open(True)

    def violation(self, text: str) -> None:
        """Record something the pool must never do."""
        self.violations.append(text)


class FakeSandbox(Sandbox):
    """A sandbox that runs nothing: its state ("new", "starting", "running", "resetting", "stopped",
    "broken", "abandoned"), whether a holder has it (`held`) and whether a trial used it since its last reset
    (`dirty`). A cancelled start is abandoned, except for every second sandbox, which (like a start past its
    point of no return) finishes anyway and comes back to the pool."""

    capabilities = frozenset({Capability.RESET})

    def __init__(self, spec: SandboxSpec, world: World) -> None:
        super().__init__(spec)
        self.world = world
        self.number = len(world.sandboxes)
        self.state = "new"
        self.held = False
        self.dirty = False
        self.starts = self.resets = self.stops = 0

    @property
    def alive(self) -> bool:
        """Started (or starting) and not stopped: what `close` must leave no one of."""
        return self.state in ("starting", "running", "resetting", "broken")

    async def start(self) -> None:
        self.state = "starting"
        try:
            await self.world.wait("start", self)
        except asyncio.CancelledError:
            if self.number % 2:
                self.state = "abandoned"
                raise
        except SandboxError:
            self.state = "abandoned"
            raise
        self.state = "running"
        self.starts += 1

    async def reset(self) -> None:
        if self.held:
            self.world.violation(f"{self.spec.name} reset while a holder has it")
        if id(self) in self.world.must_not_keep:
            self.world.violation(f"{self.spec.name} kept (reset) although no trial was left to take it")
        if self.state != "running":
            self.world.violation(f"{self.spec.name} reset in state {self.state}")
        self.state = "resetting"
        try:
            await self.world.wait("reset", self)
        except SandboxError:
            self.state = "broken"
            raise
        self.state = "running"
        self.dirty = False
        self.resets += 1

    async def stop(self) -> None:
        if self.held and not self.world.closing:
            self.world.violation(f"{self.spec.name} stopped while a holder has it")
        if self.state == "resetting":
            self.world.violation(f"{self.spec.name} stopped during its reset")
        if self.state in ("running", "broken", "starting"):
            self.state = "stopped"
        self.stops += 1

    async def exec(self, command, *, cwd=None, env=None, timeout=None, user=None, stdin=None):  # noqa: ASYNC109
        return ExecResult(stdout_bytes=b"", stderr_bytes=b"", exit_code=0, timed_out=False, duration=0.0)

    async def kill_processes(self) -> int:
        return 0
