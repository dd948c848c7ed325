"""Backends for checking the conformance suite itself: the local backend seen through the `Sandbox` defaults
only, and deliberately broken ones the suite must catch."""

from __future__ import annotations

from evsys.records import ExecResult, SandboxSpec
from evsys.sandbox import Capability, LocalSandbox, Sandbox


class ExecDefaultsSandbox(Sandbox):
    """A local sandbox behind the four required operations: files, shells and programs take the base
    class's exec-built defaults, and reset/spawn are refused (what a new backend gets for free)."""

    capabilities = frozenset({Capability.BINDS, Capability.LIMITS, Capability.HOST_ROOTFS})  # a local one
    network_modes = LocalSandbox.network_modes

    def __init__(self, spec: SandboxSpec) -> None:
        super().__init__(spec)
        self._inner = LocalSandbox(spec)

    @classmethod
    async def unavailable(cls) -> str | None:
        """As the local backend."""
        return await LocalSandbox.unavailable()

    async def start(self) -> None:
        """Start the local sandbox underneath."""
        await self._inner.start()

    async def exec(self, command: str, **kwargs) -> ExecResult:
        """The local sandbox's exec."""
        return await self._inner.exec(command, **kwargs)

    async def kill_processes(self) -> int:
        """The local sandbox's kill."""
        return await self._inner.kill_processes()

    async def stop(self) -> None:
        """Stop the local sandbox underneath."""
        await self._inner.stop()


class DropsStderr(LocalSandbox):
    """Broken: loses everything a command writes to stderr."""

    async def exec(self, command: str, **kwargs) -> ExecResult:
        """Exec, then forget stderr."""
        result = await super().exec(command, **kwargs)
        return result.model_copy(update={"stderr_bytes": b""})


class IgnoresCwd(LocalSandbox):
    """Broken: runs every command in the workdir, whatever `cwd` asks for."""

    async def exec(self, command: str, *, cwd: str | None = None, **kwargs) -> ExecResult:
        """Exec without the cwd."""
        return await super().exec(command, **kwargs)
