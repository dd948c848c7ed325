"""An in-memory `Sandbox`: for tests of what happens around a sandbox (the engine's jobs, trials, retries,
stores, metrics, pools), where a real one would only cost time.

Its file system is a dict of paths to bytes; nothing runs. A command runs the *program* the test scripted for
it: `exec_program` looks a program up by its script or executable (`[SHELL, "/tests/test.sh"]` by
"/tests/test.sh", `["python3", ...]` by "python3"), `exec` by the whole command text. A program is a function
of one `ProgramCall` (sync or async) that may read and write the sandbox's files and returns the output:
an `ExecResult`, a `str` (stdout, exit 0), an `int` (exit code) or None (exit 0). A command no program
matches exits 0 with no output, and is recorded in `commands` like every other, so a test can check what ran.

    def passes(call: ProgramCall) -> None:
        call.sandbox.write("/logs/verifier/reward.txt", "1")

    register_sandbox("memory", memory_backend({"/tests/test.sh": passes}))  # JobConfig(sandbox="memory")

`memory_backend` makes a class of its own per test, so the sandboxes one test made (`backend.made`) are
never another's. It declares `Capability.RESET` (a reset restores the files it had when started) and every
network mode, and keeps no process: `kill_processes` counts the programs still running (asyncio tasks).
"""

from __future__ import annotations

import asyncio
import inspect
import io
import posixpath
import shlex
import tarfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from evsys.records.sandbox import ExecResult, NetworkMode, SandboxSpec
from evsys.sandbox.base import (
    AGENT_LOGS_DIR,
    ARTIFACTS_DIR,
    SHELL,
    VERIFIER_LOGS_DIR,
    Capability,
    Sandbox,
    SandboxError,
)

ProgramOutput = ExecResult | str | int | None
Program = Callable[["ProgramCall"], ProgramOutput | Awaitable[ProgramOutput]]

__all__ = ["MemorySandbox", "Program", "ProgramCall", "ProgramOutput", "memory_backend"]


@dataclass
class ProgramCall:
    """One command as a program sees it."""

    sandbox: MemorySandbox
    command: str
    argv: list[str] = field(default_factory=list)  # exec_program's argv; [] for a shell command
    user: str = "root"
    cwd: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes = b""


class MemorySandbox(Sandbox):
    """A sandbox whose files are a dict and whose commands are scripted programs (see the module doc)."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.RESET, Capability.SWITCH_NETWORK})
    network_modes: ClassVar[frozenset[NetworkMode]] = frozenset({"no-network", "public", "allowlist"})
    programs: ClassVar[Mapping[str, Program]] = {}
    made: ClassVar[list[MemorySandbox]] = []

    def __init__(self, spec: SandboxSpec) -> None:
        super().__init__(spec)
        self.files: dict[str, bytes] = {}
        self.dirs: set[str] = set()
        self.commands: list[str] = []
        self.running = False
        self.starts = 0
        self.resets = 0
        self.network: NetworkMode = spec.network
        self._started: tuple[dict[str, bytes], set[str]] = ({}, set())
        self._running: set[asyncio.Task] = set()
        type(self).made.append(self)

    # ------------------------------------------------------------------ files, for programs and tests
    def write(self, path: str, data: bytes | str) -> None:
        """Put `data` at the absolute `path` (its parent directories made)."""
        path = _absolute(path)
        self.mkdir(posixpath.dirname(path))
        self.files[path] = data.encode() if isinstance(data, str) else data

    def mkdir(self, path: str) -> None:
        """Make the directory `path` and its parents."""
        path = _absolute(path)
        while path != "/":
            self.dirs.add(path)
            path = posixpath.dirname(path)

    def remove(self, path: str) -> None:
        """Remove the file or directory tree at `path`."""
        path = _absolute(path)
        inside = path.rstrip("/") + "/"
        self.files = {p: d for p, d in self.files.items() if p != path and not p.startswith(inside)}
        self.dirs = {d for d in self.dirs if d != path and not d.startswith(inside)}

    def read(self, path: str) -> bytes | None:
        """The bytes at `path`, or None when there is no such file."""
        return self.files.get(_absolute(path))

    # ------------------------------------------------------------------ the Sandbox contract
    async def start(self) -> None:
        """Start: the spec's files and evsys's directories placed; from now on commands run, and these files
        are what a reset returns to."""
        for directory in (self.spec.workdir, AGENT_LOGS_DIR, VERIFIER_LOGS_DIR, ARTIFACTS_DIR, "/tmp"):
            self.mkdir(directory)
        self.running = True
        for copy in self.spec.files:
            await self.upload(copy.src, copy.dst)
        self.starts += 1
        self._started = (dict(self.files), set(self.dirs))

    async def stop(self) -> None:
        """Stop (idempotent): every running program is cancelled."""
        await self.kill_processes()
        self.running = False

    async def reset(self) -> None:
        """Back to the files it had when started; running programs are cancelled."""
        self._check_running()
        await self.kill_processes()
        self.files, self.dirs = dict(self._started[0]), set(self._started[1])
        self.resets += 1

    async def set_network(self, mode: NetworkMode, allowed_hosts: Sequence[str] = ()) -> None:
        """Record the network mode (nothing is reachable either way)."""
        self.network = mode

    async def kill_processes(self) -> int:
        """Cancel every program still running; return how many there were."""
        running = [task for task in self._running if not task.done()]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        return len(running)

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
        """Run the program scripted for `command` (exit 0 when there is none)."""
        call = self._call(command, [], cwd=cwd, env=env, user=user, stdin=stdin)
        return await self._run(self.programs.get(command), call, timeout)

    async def exec_program(
        self,
        argv: list[str],
        *,
        output_file: str | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the command's own limit
        user: str | None = None,
    ) -> ExecResult:
        """Run the program scripted for `argv`'s script or executable; with `output_file`, its output goes
        there instead of coming back."""
        if not argv:
            raise SandboxError("exec_program needs a non-empty argv")
        call = self._call(shlex.join(argv), list(argv), cwd=cwd, env=env, user=user, stdin=None)
        key = argv[1] if argv[0] == SHELL and len(argv) > 1 else argv[0]
        result = await self._run(self.programs.get(key), call, timeout)
        if output_file is None:
            return result
        self.write(posixpath.join(call.cwd, output_file), result.stdout_bytes + result.stderr_bytes)
        return result.model_copy(update={"stdout_bytes": b"", "stderr_bytes": b""})

    # ------------------------------------------------------------------ files, natively
    async def upload(self, src: Path, dst: str) -> None:
        """Copy a host file or directory tree into the files."""
        src = Path(src)
        if not src.exists():
            raise SandboxError(f"upload source {src} does not exist")
        self._check_running()
        if src.is_file():
            self.write(dst, src.read_bytes())
            return
        for path in sorted(p for p in src.rglob("*") if p.is_file()):
            self.write(posixpath.join(dst, path.relative_to(src).as_posix()), path.read_bytes())

    async def download_tar(self, src: str) -> bytes:
        """A tar of `src` (a file, or a directory and everything below it) under its base name."""
        self._check_running()
        root = _absolute(src)
        inside = root.rstrip("/") + "/"
        if root not in self.files and root not in self.dirs:
            raise SandboxError(f"packing {src} failed: no such file or directory")
        name = posixpath.basename(root)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for directory in sorted(d for d in self.dirs if d == root or d.startswith(inside)):
                _add(tar, name + directory[len(root) :], None)
            for path, data in sorted(self.files.items()):
                if path == root or path.startswith(inside):
                    _add(tar, name + path[len(root) :], data)
        return buffer.getvalue()

    async def read_file(self, path: str, max_bytes: int = 1 << 20) -> bytes:
        """The last `max_bytes` of the file at `path`."""
        self._check_running()
        data = self.read(path)
        if data is None:
            raise SandboxError(f"reading {path} failed: no such file")
        return data[-max_bytes:] if max_bytes else b""

    async def write_file(
        self,
        path: str,
        data: bytes,
        *,
        mode: int | None = None,
        user: str | None = None,
        cwd: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the write's own limit
    ) -> None:
        """Put `data` at `path` (relative to `cwd`, default the spec's workdir)."""
        self._check_running()
        self.write(posixpath.join(cwd or self.spec.workdir, path), data)

    async def replace_tree(
        self, data: bytes, dst: str, *, empty: Sequence[str] = (), mkdir: Sequence[str] = ()
    ) -> None:
        """Remove `dst` and empty each of `empty`, then extract the tar `data` at `dst`."""
        self._check_running()
        for gone in (dst, *empty):
            self.remove(gone)
        for directory in (*empty, *mkdir, dst):
            self.mkdir(directory)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                extracted = tar.extractfile(member) if member.isfile() else None
                if extracted is not None:
                    self.write(posixpath.join(dst, member.name), extracted.read())
                elif member.isdir():
                    self.mkdir(posixpath.join(dst, member.name))

    # ------------------------------------------------------------------ running programs
    def _call(
        self,
        command: str,
        argv: list[str],
        *,
        cwd: str | None,
        env: dict[str, str] | None,
        user: str | None,
        stdin: bytes | None,
    ) -> ProgramCall:
        self._check_running()
        self.commands.append(command)
        return ProgramCall(
            sandbox=self,
            command=command,
            argv=argv,
            user=user or self.spec.user,
            cwd=cwd or self.spec.workdir,
            env={**self.spec.env, **(env or {})},
            stdin=stdin or b"",
        )

    async def _run(self, program: Program | None, call: ProgramCall, timeout: float | None) -> ExecResult:  # noqa: ASYNC109
        """Run `program` as a task `kill_processes` can cancel (exit 137), within `timeout` (exit 124)."""
        if program is None:
            return ExecResult(exit_code=0)
        task = asyncio.ensure_future(_output(program, call))
        self._running.add(task)
        try:
            output = await asyncio.wait_for(task, timeout)
        except TimeoutError:
            return ExecResult(exit_code=124, timed_out=True)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and current is not None and not current.cancelling():
                return ExecResult(exit_code=137)  # killed by kill_processes, stop or reset
            raise
        finally:
            self._running.discard(task)
        return _as_result(output)

    def _check_running(self) -> None:
        if not self.running:
            raise SandboxError(f"sandbox {self.spec.name} is not running")


def memory_backend(programs: Mapping[str, Program] | None = None) -> type[MemorySandbox]:
    """A `MemorySandbox` class of its own, running `programs` (by script, executable or command text), with
    its own list of the sandboxes made (`made`)."""
    return type("MemorySandbox", (MemorySandbox,), {"programs": dict(programs or {}), "made": []})


async def _output(program: Program, call: ProgramCall) -> ProgramOutput:
    output = program(call)
    return await output if inspect.isawaitable(output) else output


def _as_result(output: ProgramOutput) -> ExecResult:
    if isinstance(output, ExecResult):
        return output
    if isinstance(output, str):
        return ExecResult(exit_code=0, stdout_bytes=output.encode())
    return ExecResult(exit_code=output or 0)


def _absolute(path: str) -> str:
    return posixpath.normpath(posixpath.join("/", path))


def _add(tar: tarfile.TarFile, name: str, data: bytes | None) -> None:
    info = tarfile.TarInfo(name)
    if data is None:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
        return
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))
