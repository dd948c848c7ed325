"""`SlotPool`: slots over any sandbox backend — `acquire`, `exec_tool` / `execute_batch` / `tool_handler`,
`release`, `close` (see the package docstring)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from evsys.records import ExecResult, ExecutionResult, SandboxSpec
from evsys.sandbox.base import Sandbox, SandboxError
from evsys.sandbox.pool import IDLE_TIMEOUT_SEC, Lease, ReusePolicy, SandboxPool, SharePolicy, WarmPolicy
from evsys.sandbox.registry import create_sandbox
from evsys.sandbox.slots.sandbox import SlotSandbox
from evsys.sandbox.slots.slot import SLOTS_DIR, Slot, clean_slot, slot_exec
from evsys.sandbox.tools import SANDBOX_TOOLS

TOOLS = tuple(SANDBOX_TOOLS)  # bash, read_file, write_file (evsys.sandbox.tools)


@dataclass
class _SlotRunner:
    """Runs the sandbox tools on a slot: each command (bash too) once, as the slot's user in its workspace."""

    slot: Slot
    limit: float

    async def exec(self, command: str, *, stdin: bytes | None = None) -> ExecResult:
        return await slot_exec(self.slot, command, cwd=self.slot.workspace, timeout=self.limit, stdin=stdin)

    async def shell(self, command: str) -> ExecResult:
        return await self.exec(command)


class SlotPool:
    """Slots over any sandbox backend (see the package docstring), a façade over one `SandboxPool`
    (evsys.sandbox.pool): a slot is a lease of it, with a uid and a workspace when it shares its sandbox.

    `slots_per_sandbox` slots share a sandbox; `min_sandboxes` sandboxes are kept started ahead of demand
    (shared: started by `fill`/`async with` and never stopped for idleness below that; one slot per sandbox:
    that many warm sandboxes per spec); at most `max_sandboxes` run at once (None: no bound), `acquire` waits
    for a release past that. A shared sandbox with every slot free is stopped after `idle_timeout_sec` while
    more than `min_sandboxes` run. `sandboxes`: a pool of your own to take the slots from (its policies then
    decide, and the other options are not used)."""

    def __init__(
        self,
        spec: SandboxSpec | None = None,
        *,
        backend: str = "local",
        slots_per_sandbox: int = 1,
        min_sandboxes: int = 0,
        max_sandboxes: int | None = None,
        max_idle: int = 8,
        idle_timeout_sec: float = IDLE_TIMEOUT_SEC,
        command_timeout: float = 600.0,
        sandboxes: SandboxPool | None = None,
    ) -> None:
        if slots_per_sandbox < 1:
            raise ValueError(f"slots_per_sandbox must be >= 1, got {slots_per_sandbox}")
        _check_bounds(min_sandboxes, max_sandboxes)
        self.spec = spec
        self.backend = backend
        self.slots_per_sandbox = slots_per_sandbox
        self.command_timeout = command_timeout
        self.pool = sandboxes or _pool(
            backend, slots_per_sandbox, min_sandboxes, max_sandboxes, max_idle, idle_timeout_sec
        )
        self._count = 0

    @classmethod
    def for_backend(
        cls,
        backend: str,
        *,
        max_idle: int,
        warm: int = 0,
        idle_timeout_sec: float = IDLE_TIMEOUT_SEC,
        demand: Callable[[], int] | None = None,
    ) -> SlotPool:
        """One slot per sandbox on `backend` (`SandboxPool.for_backend`: up to `max_idle` reset sandboxes
        kept, never more than `demand()` when given; `warm` started ones per spec ready ahead of demand)."""
        pool = SandboxPool.for_backend(
            backend, max_idle=max_idle, warm=warm, idle_timeout_sec=idle_timeout_sec, demand=demand
        )
        return cls(backend=backend, sandboxes=pool)

    def prewarm(self, spec: SandboxSpec) -> None:
        """Start `spec`'s warm sandboxes now, ahead of its first slot (a pool made with `warm`)."""
        self.pool.prewarm(spec)

    async def fill(self, spec: SandboxSpec | None = None) -> None:
        """Start `min_sandboxes` sandboxes of `spec` (default the pool's) now, ahead of the first slot."""
        spec = spec or self.spec
        if spec is None:
            raise ValueError("SlotPool.fill: no spec given and the pool has no default spec")
        await self.pool.fill(spec)

    async def __aenter__(self) -> SlotPool:
        """The pool with its `min_sandboxes` started (when it has a default spec)."""
        if self.spec is not None:
            await self.fill()
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Stop everything (`close`)."""
        await self.close()

    @property
    def idle_count(self) -> int:
        """Sandboxes waiting for their next slot (reset ones and warm ones)."""
        return self.pool.idle_count

    @property
    def shared_sandboxes(self) -> list[Sandbox]:
        """The running shared sandboxes (slots_per_sandbox > 1)."""
        return self.pool.shared_sandboxes

    @property
    def waiting(self) -> int:
        """`acquire`s waiting for a release (`max_sandboxes` running, every slot of theirs taken)."""
        return self.pool.waiting

    @property
    def started_sandboxes(self) -> int:
        """Sandboxes started so far."""
        return self.pool.started

    def _spec(self, spec: SandboxSpec | None) -> SandboxSpec:
        if spec is not None:
            return spec
        if self.spec is None:
            raise ValueError("SlotPool.acquire: no spec given and the pool has no default spec")
        self._count += 1
        return self.spec.model_copy(update={"name": f"{self.spec.name}-{self._count}"})

    async def acquire(
        self,
        trajectory_id: str,
        spec: SandboxSpec | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - bounds waiting for the slot
    ) -> Slot:
        """A slot for `trajectory_id` (on a sandbox of `spec`, default the pool's): its own sandbox, or a
        free place in a shared one (started when none has room, waiting for a release at `max_sandboxes`).
        Bounded by `timeout` seconds (TimeoutError); never leaves a sandbox running or a place taken when
        cancelled. A shared slot is handed over clean: no process of its uid, its workspace (HOME, cwd) and
        temporary directory empty."""
        spec = self._spec(spec)
        async with asyncio.timeout(timeout):
            lease = await self.pool.acquire(spec)
            if not lease.shared:
                return Slot(lease.sandbox.spec.name, trajectory_id, lease, lease.sandbox.spec.workdir)
            return await _shared_slot(trajectory_id, lease)

    def was_reused(self, slot: Slot) -> bool:
        """True when the slot's own sandbox is a reset sandbox of an earlier slot (shared slots: False)."""
        return slot.lease.reused

    async def release(
        self, slot: Slot, reset_workspace: bool = True, *, reusable: bool = True, wait: bool = True
    ) -> None:
        """Give the slot back: its processes are killed; with `reset_workspace` its files are gone too (an
        own sandbox is reset to its started state and kept for the next slot; a shared slot's workspace and
        temporary directory emptied, its IPC objects and its files in /tmp, /var/tmp, /dev/shm and /run/lock
        removed). An own sandbox is stopped instead when `reusable` is False (its trial went wrong in it) or
        when it keeps its files (`reset_workspace=False`); a shared sandbox whose cleanup fails is stopped
        once its other slots are back. `wait=False`: an own sandbox to be reset is reset in the background
        (`Lease.release`; not with `max_sandboxes`, whose room is given back only once it is done)."""
        if slot.given_back or slot.lease.released:
            return  # released already
        slot.given_back = True
        if not slot.shared:
            try:
                if not reset_workspace:
                    await slot.sandbox.kill_processes()
            finally:
                await slot.lease.release(reusable=reusable and reset_workspace, wait=wait)
            return
        broken = True
        try:
            await clean_slot(slot, processes_only=not reset_workspace)
            broken = False
        finally:
            await slot.lease.release(reusable=not broken, cleaned=reset_workspace)

    async def close(self) -> None:
        """Stop every sandbox the pool holds (slots still taken included)."""
        await self.pool.close()

    async def aclose(self) -> None:
        """`close`."""
        await self.close()

    async def exec_tool(
        self,
        slot: Slot,
        tool: str,
        args: dict[str, Any],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> ExecutionResult:
        """Run one tool call on `slot`: `bash` {command}, `read_file` {path}, `write_file` {path, content}."""
        async with slot.lock:
            try:
                return await self._dispatch(slot, tool, args, timeout or self.command_timeout)
            except (KeyError, TypeError) as exc:
                return ExecutionResult(success=False, error=f"bad arguments for {tool}: {exc}")
            except SandboxError as exc:
                return ExecutionResult(success=False, error=str(exc))

    async def _dispatch(self, slot: Slot, name: str, args: dict[str, Any], limit: float) -> ExecutionResult:
        tool = SANDBOX_TOOLS.get(name)
        if tool is None:
            return ExecutionResult(success=False, error=f"unknown tool {name!r} (tools: {', '.join(TOOLS)})")
        result = await tool.run(_SlotRunner(slot, limit), args)
        return ExecutionResult(
            success=result.ok,
            output=result.stdout_shown,
            error=result.stderr_shown,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            metadata={"duration": result.duration, "slot": slot.slot_id},
        )

    async def execute_batch(
        self,
        calls: Sequence[tuple[Slot, str, dict[str, Any]]],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> list[ExecutionResult]:
        """Run the calls concurrently across slots (in order on one slot); results in call order."""
        return list(await asyncio.gather(*(self.exec_tool(s, t, a, timeout) for s, t, a in calls)))

    def as_sandbox(self, slot: Slot) -> Sandbox:
        """The slot as a `Sandbox` for an agent: an own sandbox as it is, a shared slot as a `SlotSandbox`."""
        return slot.sandbox if not slot.shared else SlotSandbox(slot)

    def tool_handler(self, slot: Slot) -> Callable[[str, dict[str, Any]], Awaitable[str]]:
        """An `async (tool_name, args) -> str` for an agent loop: each result as a JSON string."""

        async def handle(tool_name: str, args: dict[str, Any]) -> str:
            return (await self.exec_tool(slot, tool_name, args)).to_json()

        return handle


def _check_bounds(min_sandboxes: int, max_sandboxes: int | None) -> None:
    if min_sandboxes < 0:
        raise ValueError(f"min_sandboxes must be >= 0, got {min_sandboxes}")
    if max_sandboxes is not None and max_sandboxes < max(1, min_sandboxes):
        raise ValueError(
            f"max_sandboxes must be >= 1 and >= min_sandboxes ({min_sandboxes}), got {max_sandboxes}"
        )


def _pool(
    backend: str,
    slots_per_sandbox: int,
    min_sandboxes: int,
    max_sandboxes: int | None,
    max_idle: int,
    idle_timeout_sec: float,
) -> SandboxPool:
    """The `SandboxPool` of a `SlotPool` made from its options: shared places past one slot per sandbox."""
    own = slots_per_sandbox == 1
    share = None if own else SharePolicy(slots_per_sandbox, min_sandboxes, idle_timeout_sec)
    return SandboxPool(
        lambda spec: create_sandbox(spec, backend=backend),
        backend=backend,
        reuse=ReusePolicy(max_idle=max_idle),
        warm=WarmPolicy(count=min_sandboxes if own else 0, idle_timeout_sec=idle_timeout_sec),
        share=share,
        max_sandboxes=max_sandboxes,
    )


async def _shared_slot(trajectory_id: str, lease: Lease) -> Slot:
    """A slot on a shared place, handed over clean (cleaned now unless nothing ran since its last cleaning);
    the place goes back when this fails (the sandbox stopped when cleaning it failed)."""
    assert lease.place is not None
    try:
        uid = lease.sandbox.extra_uid(lease.place)
    except BaseException:
        await lease.release(reusable=False)
        raise
    workspace = f"{SLOTS_DIR}/{lease.place}"
    slot = Slot(f"{lease.sandbox.spec.name}/{lease.place}", trajectory_id, lease, workspace, uid)
    try:
        if not lease.clean:
            await clean_slot(slot)
    except BaseException as exc:
        await lease.release(reusable=not isinstance(exc, SandboxError))
        raise
    return slot
