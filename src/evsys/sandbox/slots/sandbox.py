"""`SlotSandbox`: a slot seen as a `Sandbox`, so that any agent runs in it unchanged."""

from __future__ import annotations

from evsys.records import ExecResult, SandboxSpec
from evsys.sandbox.base import Sandbox
from evsys.sandbox.slots.slot import Slot, clean_slot, slot_exec


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
        return await clean_slot(self.slot, processes_only=True)

    async def stop(self) -> None:
        """Nothing to do: `SlotPool.release` gives the slot back."""
