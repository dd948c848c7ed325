"""The slot API for environment authors: `SlotPool.acquire(trajectory_id) -> Slot`, `execute_batch`,
`release`.

A slot is where one trajectory's tool calls run. With `slots_per_sandbox=1` (the default, and what the local
backend should use: its sandboxes start in ~10 ms and reset in ~2 ms) a slot is a whole sandbox of its own,
taken from a `SandboxPool` and reset when released. With `slots_per_sandbox=N` (backends where a sandbox is
expensive) N slots share one sandbox, each isolated by more than a directory: its own uid
(`Sandbox.extra_uid(index)`, on the local backend one of the sandbox's own block; no supplementary groups, no
capabilities), its own workspace (`/slots/<index>`, mode 0700, owned by that uid, also its HOME and cwd), and
every command in a new session (`setsid`, its own process group); releasing a slot kills every process of its
uid and, with `reset_workspace=True`, empties its workspace.

Two interfaces, for two different callers:
- `exec_tool(slot, tool, args) -> ExecutionResult` — structured (success, output, error, exit code), for an
  environment's setup and verify hooks;
- `tool_handler(slot)` — an `async (tool_name, args) -> str` returning a JSON string, for an agent loop that
  feeds tool results back to the model.
`execute_batch([(slot, tool, args), ...])` runs calls on different slots concurrently (one asyncio task each;
every sandbox operation is async, nothing blocks the event loop) and returns results in call order; calls on
the same slot run one after the other, in order.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from evsys.records import ExecResult, SandboxSpec
from evsys.sandbox.base import HELPER_ENV, Sandbox, SandboxError
from evsys.sandbox.pool import SandboxPool
from evsys.sandbox.tools import SANDBOX_TOOLS
from evsys.sandbox.warm import IDLE_TIMEOUT_SEC

SLOTS_DIR = "/slots"
TOOLS = tuple(SANDBOX_TOOLS)  # bash, read_file, write_file (evsys.sandbox.tools)


async def slot_exec(
    slot: Slot,
    command: str,
    *,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 - the command's own limit
    stdin: bytes | None = None,
) -> ExecResult:
    """Run `command` as the slot's user: in a shared sandbox root drops to the slot's uid (no groups, no
    capabilities) in a session of its own, HOME at the slot's workspace; in an own sandbox as its agent."""
    if not slot.shared:
        return await slot.sandbox.exec(
            command, cwd=cwd or slot.workspace, env=env, timeout=timeout, stdin=stdin
        )
    drop = f"setpriv --reuid={slot.uid} --regid={slot.uid} --clear-groups --inh-caps=-all"
    env = {**(env or {}), "HOME": slot.workspace, "USER": f"slot{slot.uid}"}
    wrapped = f"exec {drop} setsid --wait bash -c {shlex.quote(command)}"
    return await slot.sandbox.exec(
        wrapped, cwd=cwd or slot.workspace, user="root", env=env, timeout=timeout, stdin=stdin
    )


@dataclass
class _SlotRunner:
    """Runs the sandbox tools on a slot: each command (bash too) once, as the slot's user in its workspace."""

    slot: Slot
    limit: float

    async def exec(self, command: str, *, stdin: bytes | None = None) -> ExecResult:
        return await slot_exec(self.slot, command, cwd=self.slot.workspace, timeout=self.limit, stdin=stdin)

    async def shell(self, command: str) -> ExecResult:
        return await self.exec(command)


class ExecutionResult(BaseModel):
    """The structured outcome of one tool call on a slot."""

    success: bool
    output: str = ""
    error: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)

    def to_json(self) -> str:
        """What `tool_handler` returns: the result as a JSON string (output, error, exit code)."""
        return json.dumps({"output": self.output, "error": self.error, "exit_code": self.exit_code})


@dataclass(eq=False)
class Slot:
    """One trajectory's place to run tools: a sandbox, and (when shared) a uid and workspace inside it."""

    slot_id: str
    trajectory_id: str
    sandbox: Sandbox
    workspace: str
    uid: int | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    @property
    def shared(self) -> bool:
        """True when the slot shares its sandbox with other slots."""
        return self.uid is not None


@dataclass(eq=False)
class _Shared:
    sandbox: Sandbox
    free: list[int]
    key: str


def _share_key(spec: SandboxSpec) -> str:
    """Slots of specs equal in everything but the name may share a sandbox."""
    return json.dumps(spec.model_dump(mode="json", exclude={"name"}), sort_keys=True)


class SlotPool:
    """Slots over any sandbox backend (see the module docstring). The engine takes every trial's sandbox
    from one (`for_backend`, one slot per sandbox); `acquire` then gets the trial's own spec."""

    def __init__(
        self,
        spec: SandboxSpec | None = None,
        *,
        backend: str = "local",
        slots_per_sandbox: int = 1,
        max_idle: int = 8,
        command_timeout: float = 600.0,
        sandboxes: SandboxPool | None = None,
    ) -> None:
        if slots_per_sandbox < 1:
            raise ValueError(f"slots_per_sandbox must be >= 1, got {slots_per_sandbox}")
        self.spec = spec
        self.slots_per_sandbox = slots_per_sandbox
        self.command_timeout = command_timeout
        self._pool = sandboxes or SandboxPool.for_backend(backend, max_idle=max_idle)
        self._shared: list[_Shared] = []
        self._lock = asyncio.Lock()
        self._count = 0

    @classmethod
    def for_backend(
        cls, backend: str, *, max_idle: int, warm: int = 0, idle_timeout_sec: float = IDLE_TIMEOUT_SEC
    ) -> SlotPool:
        """One slot per sandbox on `backend`, keeping up to `max_idle` reset sandboxes (0: none) and `warm`
        started ones per spec ready ahead of demand (evsys.sandbox.warm; `idle_timeout_sec`)."""
        pool = SandboxPool.for_backend(
            backend, max_idle=max_idle, warm=warm, idle_timeout_sec=idle_timeout_sec
        )
        return cls(backend=backend, sandboxes=pool)

    def prewarm(self, spec: SandboxSpec) -> None:
        """Start `spec`'s warm sandboxes now, ahead of its first slot (a pool made with `warm`)."""
        self._pool.prewarm(spec)

    @property
    def idle_count(self) -> int:
        """Reset sandboxes waiting for their next slot."""
        return self._pool.idle_count

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
        timeout: float | None = None,  # noqa: ASYNC109 - bounds starting a sandbox
    ) -> Slot:
        """A slot for `trajectory_id` (on a sandbox of `spec`, default the pool's): its own sandbox, or a
        free place in a shared one (started when none has room). Starting a sandbox is bounded by
        `timeout` seconds (TimeoutError) and never leaves one running when cancelled."""
        spec = self._spec(spec)
        if self.slots_per_sandbox == 1:
            sandbox = await self._pool.acquire_within(spec, timeout)
            return Slot(sandbox.spec.name, trajectory_id, sandbox, sandbox.spec.workdir)
        key = _share_key(spec)
        async with self._lock:
            shared = next((s for s in self._shared if s.key == key and s.free), None)
            if shared is None:
                sandbox = await self._pool.acquire_within(spec, timeout)
                shared = _Shared(sandbox, list(range(self.slots_per_sandbox)), key)
                self._shared.append(shared)
            index = shared.free.pop(0)
        uid = shared.sandbox.extra_uid(index)
        slot = Slot(
            f"{shared.sandbox.spec.name}/{index}", trajectory_id, shared.sandbox, f"{SLOTS_DIR}/{index}", uid
        )
        await self._reset_workspace(slot)
        return slot

    def was_reused(self, slot: Slot) -> bool:
        """True when the slot's own sandbox is a reset sandbox of an earlier slot (shared slots: False)."""
        return not slot.shared and self._pool.was_reused(slot.sandbox)

    async def _reset_workspace(self, slot: Slot) -> None:
        q = shlex.quote(slot.workspace)
        command = f"rm -rf {q} && mkdir -p {q} && chown {slot.uid}:{slot.uid} {q} && chmod 700 {q}"
        result = await slot.sandbox.exec(command, cwd="/", user="root", env=HELPER_ENV)
        if not result.ok:
            raise SandboxError(
                f"slot {slot.slot_id}: resetting its workspace failed: {result.stderr.strip()}"
            )

    async def release(self, slot: Slot, reset_workspace: bool = True, *, reusable: bool = True) -> None:
        """Give the slot back: its processes are killed; with `reset_workspace` its files are gone too (an
        own sandbox is reset to its started state and kept for the next slot; a shared one's workspace
        emptied). An own sandbox is stopped instead when `reusable` is False (its trial went wrong in it)
        or when it keeps its files (`reset_workspace=False`)."""
        if not slot.shared:
            if not reset_workspace:
                await slot.sandbox.kill_processes()
            await self._pool.release(slot.sandbox, reusable=reusable and reset_workspace)
            return
        await slot.sandbox.exec(f"pkill -KILL -U {slot.uid}; true", cwd="/", user="root", env=HELPER_ENV)
        if reset_workspace:
            await self._reset_workspace(slot)
        async with self._lock:
            for shared in self._shared:
                if shared.sandbox is slot.sandbox:
                    shared.free.append(int(slot.workspace.rsplit("/", 1)[1]))

    async def close(self) -> None:
        """Stop every sandbox the pool holds."""
        for shared in self._shared:
            await self._pool.release(shared.sandbox, reusable=False)
        self._shared.clear()
        await self._pool.close()

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


class SlotSandbox(Sandbox):
    """A slot seen as a `Sandbox`, so any agent (the loop agent, a harness) runs in it unchanged: commands run
    as the slot's user in its workspace (`slot_exec`); evsys's own helpers asking for root run as root, as in
    any sandbox. Starting and stopping are the pool's business (acquire, release); `kill_processes` kills the
    slot's processes only."""

    @classmethod
    def unsupported(cls, spec: SandboxSpec) -> str | None:
        """Nothing: the slot's sandbox was created (and its spec checked) by its own backend."""
        return None

    def __init__(self, slot: Slot) -> None:
        spec = slot.sandbox.spec.model_copy(update={"workdir": slot.workspace, "name": slot.slot_id})
        super().__init__(spec)
        self.slot = slot

    async def start(self) -> None:
        """Nothing to do: the slot is running once acquired."""

    async def exec(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the command's own limit
        user: str | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run as the slot's user (as root only when evsys's own helpers ask for it)."""
        if user == "root":
            return await self.slot.sandbox.exec(
                command, cwd=cwd, env=env, timeout=timeout, user="root", stdin=stdin
            )
        return await slot_exec(self.slot, command, cwd=cwd, env=env, timeout=timeout, stdin=stdin)

    async def kill_processes(self) -> int:
        """Kill the slot's processes (a whole own sandbox's, or every process of a shared slot's uid)."""
        if not self.slot.shared:
            return await self.slot.sandbox.kill_processes()
        result = await self.slot.sandbox.exec(
            f"pgrep -c -U {self.slot.uid}; pkill -KILL -U {self.slot.uid}; true",
            cwd="/",
            user="root",
            env=HELPER_ENV,
        )
        return int((result.stdout.split() or ["0"])[0])

    async def stop(self) -> None:
        """Nothing to do: `SlotPool.release` gives the slot back."""
