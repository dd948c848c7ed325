"""Starting harness processes: the `ProcessLauncher` protocol and the host implementation.

An adapter does not care where its harness runs; it asks a launcher for a process with piped stdin, stdout and
stderr. `HostProcessLauncher` runs it on the host in its own session and process group with a minimal
environment (nothing of the host's environment leaks in, API keys included). A sandbox launcher (the harness
inside the trial's sandbox) needs a streaming `spawn` from the sandbox; see docs/harnesses.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Protocol, runtime_checkable

from evsys.sandbox.base import StreamingProcess
from evsys.util.atomic import write_bytes_atomic
from evsys.util.procfs import children

BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"}
STREAM_LIMIT = 16 * 1024 * 1024  # longest stdout line the adapter accepts (JSON events can be large)


HarnessProcess = StreamingProcess
"""A running harness process with piped standard streams: the same shape as a sandbox's `spawn` gives."""


@runtime_checkable
class ProcessLauncher(Protocol):
    """Starts harness processes somewhere (the host, a sandbox)."""

    async def launch(self, argv: list[str], *, env: dict[str, str], cwd: str) -> HarnessProcess:
        """Start `argv` in `cwd` with exactly `env` (plus the launcher's base variables)."""
        ...

    async def write_file(self, path: str, data: bytes) -> None:
        """Place a file where the harness will read it (its MCP configuration)."""
        ...

    async def read_file(self, path: str) -> bytes | None:
        """Read a file the harness wrote (its native log), or None when it cannot be read."""
        ...


class HostProcess:
    """A harness process on the host, leader of its own process group."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        if process.stdin is None or process.stdout is None or process.stderr is None:
            raise ValueError("a harness process needs piped stdin, stdout and stderr")
        self._process = process
        self.stdin: asyncio.StreamWriter = process.stdin
        self.stdout: asyncio.StreamReader = process.stdout
        self.stderr: asyncio.StreamReader = process.stderr

    @property
    def pid(self) -> int:
        """The process id (also its process group id)."""
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """The exit code, or None while running."""
        return self._process.returncode

    async def wait(self) -> int:
        """Wait for exit."""
        return await self._process.wait()

    async def kill(self) -> None:
        """SIGKILL the process and every descendant (also those that started a session of their own), then
        reap the leader. Descendants are stopped first, so none forks or escapes while the tree is walked."""
        tree = await asyncio.to_thread(_stop_tree, self._process.pid)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGKILL)
        await self._process.wait()


def _stop_tree(root: int) -> list[int]:
    """SIGSTOP `root` and its descendants, walking until no new one appears; return them all."""
    seen: list[int] = []
    pending = [root]
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGSTOP)
        seen.append(pid)
        pending += children(pid)
    return seen


class HostProcessLauncher:
    """Runs harnesses as host subprocesses (tests, trusted harnesses); hostile code belongs in a sandbox."""

    async def launch(self, argv: list[str], *, env: dict[str, str], cwd: str) -> HostProcess:
        """Start `argv` in a new session with BASE_ENV + `env` as its whole environment."""
        if not await asyncio.to_thread(os.path.isdir, cwd):
            raise FileNotFoundError(f"harness working directory {cwd!r} does not exist on the host")
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env={**BASE_ENV, **env},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            limit=STREAM_LIMIT,
        )
        return HostProcess(process)

    async def write_file(self, path: str, data: bytes) -> None:
        """Write `data` to the host path `path` atomically."""
        await asyncio.to_thread(write_bytes_atomic, Path(path), data)

    async def read_file(self, path: str) -> bytes | None:
        """The bytes of the host file `path`, or None if it cannot be read."""
        try:
            return await asyncio.to_thread(Path(path).read_bytes)
        except OSError:
            return None
