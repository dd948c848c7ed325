"""The contract every isolation backend implements: the `Sandbox` base class, and the records that cross it.

A sandbox is where an agent's (hostile) code runs. The engine asks for one with a `SandboxSpec` (through the
registry: `evsys.sandbox.create_sandbox(spec, backend)`), starts it, runs commands with `exec`, moves files
with `upload`/`download`, kills every agent process with `kill_processes` before verification, and tears it
down with `stop` (idempotent). Agents get a stateful `ShellSession` from `shell()`. Optional abilities (reset
in place, streaming processes, binds, images, limit reporting) are declared as `Capability` flags; the file
helpers (`write_file`, `replace_tree`, `read_file`, `download_tar`, `copy_out`, `exec_program`) have defaults
built on `exec` that a backend overrides with native calls. The conformance suite in
`evsys.sandbox.conformance` checks a backend.
"""

from __future__ import annotations

import asyncio
import itertools
import shlex
from abc import ABC, abstractmethod
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import ClassVar, Protocol, Self, runtime_checkable

from evsys.records import CausedError, FailureCause
from evsys.records.sandbox import CopyOutLimits, ExecResult, NetworkMode, SandboxSpec
from evsys.sandbox.copyout import CopiedTree, bound_tar
from evsys.util.tarsafe import extract_one, tar_of

# Where a trial's files live inside every sandbox (Harbor-compatible paths).
LOGS_DIR = "/logs"
AGENT_LOGS_DIR = "/logs/agent"
VERIFIER_LOGS_DIR = "/logs/verifier"
ARTIFACTS_DIR = "/logs/artifacts"
TESTS_DIR = "/tests"
EXTRA_UID_BASE = 20000  # extra users' uids on a backend without uids of its own per sandbox
SOLUTION_DIR = "/solution"

# What evsys itself starts inside a sandbox (the verifier's and the oracle's shell, file helpers) it starts by
# absolute path, never through the trial's PATH (which the task may point at agent-writable directories).
# Every command of the local backend already runs under this bash; an image without it cannot run commands.
SHELL = "/bin/bash"
# The PATH of evsys's own helper commands (rm, tar, tail, cat...): the distribution's directories only.
HELPER_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
HELPER_ENV = {"PATH": HELPER_PATH}


class SandboxError(CausedError, RuntimeError):
    """The sandbox could not be created, used or torn down (cause `sandbox_failed`)."""

    failure_cause = FailureCause.SANDBOX_FAILED


class SandboxUnsupported(SandboxError):
    """The spec asks for something this backend cannot provide (e.g. `allowlist` networking)."""


@runtime_checkable
class ShellSession(Protocol):
    """A stateful shell inside a sandbox: cwd and exported variables persist between `run` calls."""

    async def run(self, command: str, *, timeout: float | None = None) -> ExecResult:  # noqa: ASYNC109
        """Run one command in the session; a timeout kills that command, not the session."""
        ...

    async def close(self) -> None:
        """End the session (idempotent)."""
        ...


class ProcessStdin(Protocol):
    """The stdin of a `StreamingProcess`: `write`, `drain` and `close` as on an `asyncio.StreamWriter`."""

    def write(self, data: bytes) -> None:
        """Queue `data` for the process (in order)."""
        ...

    async def drain(self) -> None:
        """Wait until the process's pipe has room again."""
        ...

    def close(self) -> None:
        """Close the pipe: the process reads end-of-file after what was written."""
        ...


@runtime_checkable
class StreamingProcess(Protocol):
    """A long-lived process from `Sandbox.spawn`: `stdout`/`stderr` are `asyncio.StreamReader`s, `stdin` takes
    `write`/`drain`/`close` like an `asyncio.StreamWriter`."""

    @property
    def stdin(self) -> ProcessStdin:
        """The process's stdin (read-only here, so an implementation may narrow its type)."""
        ...

    stdout: asyncio.StreamReader
    stderr: asyncio.StreamReader

    @property
    def returncode(self) -> int | None:
        """The exit code (128+n when killed by signal n), or None while running."""
        ...

    async def wait(self) -> int:
        """Wait for the process to exit; return its exit code."""
        ...

    async def kill(self) -> None:
        """Kill the process and everything it started, then wait for it (idempotent)."""
        ...


class Capability(StrEnum):
    """Optional abilities a backend declares in `Sandbox.capabilities` (callers check them, never probe)."""

    RESET = "reset"  # reset(): back to the just-started state in place; pools reuse such sandboxes
    SPAWN = "spawn"  # spawn(): processes with streaming stdin/stdout/stderr (external agent harnesses)
    BINDS = "binds"  # SandboxSpec.binds: host paths mounted in
    IMAGES = "images"  # SandboxSpec.image: runs the given image instead of the host-rootfs layer
    # SandboxSpec.image as the task names it (its docker_image, or ImageSpec.dockerfile): the service pulls or
    # builds it, the engine builds nothing here
    REMOTE_IMAGES = "remote-images"
    LIMITS = "limits"  # ExecResult.limits_hit reports the memory and pids limits a command ran into
    SWITCH_NETWORK = "switch-network"  # set_network(): another network mode between a trial's phases
    PODS = "pods"  # SandboxSpec.pod: sandboxes sharing a network, reachable by name
    # run_verifier(): the tests, /logs/verifier and /tmp private to the verifier (docs/sandbox.md)
    PRIVATE_VERIFIER = "private-verifier"
    # a spec with no image runs on this host's own root filesystem (/usr): a task whose base the host provably
    # provides (evsys.task.hostbase) may run there; on other backends every declared base is built or pulled
    HOST_ROOTFS = "host-rootfs"


class Sandbox(ABC):
    """An isolated place to run commands; the base class of every backend (see docs/extending.md).

    Required: `start`, `exec`, `kill_processes`, `stop`. Everything else has a default built on `exec` (a
    POSIX shell and coreutils/tar in the sandbox) that a backend overrides with native calls when it can.
    Optional abilities are declared in `capabilities` and `network_modes`; a spec asking for more is refused
    with `SandboxUnsupported` when the sandbox is created. Use `async with sandbox:` or `start()`/`stop()`."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    network_modes: ClassVar[frozenset[NetworkMode]] = frozenset({"no-network"})
    # `evsys run`'s pre-flight asks `unavailable()` before a job directory exists (a cheap check with no side
    # effects, such as an SDK's credentials): a job that cannot start a single sandbox is refused up front.
    checked_in_preflight: ClassVar[bool] = False

    def __init__(self, spec: SandboxSpec) -> None:
        problem = self.unsupported(spec)
        if problem is not None:
            raise SandboxUnsupported(f"sandbox {spec.name}: {problem}")
        self.spec = spec

    @classmethod
    def supports(cls, capability: Capability) -> bool:
        """Whether this backend declares `capability`."""
        return capability in cls.capabilities

    @classmethod
    def unsupported(cls, spec: SandboxSpec) -> str | None:
        """Why this backend cannot provide `spec` (network mode, binds, image), or None when it can."""
        if spec.network not in cls.network_modes:
            return f"network mode {spec.network!r} is not supported (supported: {sorted(cls.network_modes)})"
        if spec.binds and not cls.supports(Capability.BINDS):
            return "bind mounts are not supported"
        if spec.image is not None and not cls.supports(Capability.IMAGES):
            return f"images are not supported yet (image {spec.image.ref!r})"
        if spec.pod is not None and not cls.supports(Capability.PODS):
            return "sidecar services (pods) are not supported"
        return None

    @classmethod
    async def unavailable(cls) -> str | None:
        """Why this backend cannot run on this machine at all (a missing tool or daemon), or None."""
        return None

    @classmethod
    async def node_problem(cls) -> str | None:
        """What a worker node must fix before it runs trials on this backend (a remote executor checks each
        node once), or None; by default `unavailable()`, a backend adds its own required checks."""
        return await cls.unavailable()

    @classmethod
    async def cleanup_stale(cls) -> int:
        """Remove what sandboxes of an earlier, killed orchestrator left behind; return how many."""
        return 0

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ---------------------------------------------------------------- required
    @abstractmethod
    async def start(self) -> None:
        """Create the sandbox; raise `SandboxError` with a clear message when that is impossible."""

    @abstractmethod
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
        """Run `command` with `bash -c` as `user` (default `spec.user`) in `cwd` (default `spec.workdir`),
        `env` on top of the spec's; a timeout kills the command's whole process tree and keeps the output
        so far. Never blocks the event loop; `SandboxError` when the sandbox is not running. Each output
        stream keeps at most `spec.max_output_bytes` (its head and tail; `ExecResult.stdout_total_bytes`
        counts all of it)."""

    @abstractmethod
    async def kill_processes(self) -> int:
        """Kill every process the sandbox's users started (not its own machinery); return the count."""

    @abstractmethod
    async def stop(self) -> None:
        """Kill everything and release every resource. Idempotent; fine before `start`."""

    # ---------------------------------------------------------------- optional, by capability
    async def reset(self) -> None:
        """Return the running sandbox to its just-started state, its network's included: no socket or
        connection of the last trial, the spec's own network rules (Capability.RESET)."""
        raise SandboxUnsupported(f"sandbox {self.spec.name}: this backend cannot reset a sandbox")

    async def set_network(self, mode: NetworkMode, allowed_hosts: Sequence[str] = ()) -> None:
        """Give the running sandbox `mode` from now on, within the network it was started with: a sandbox
        started with network can be narrowed and widened back, one started without cannot be given one
        (Capability.SWITCH_NETWORK; the engine starts a sandbox with its trial's broadest phase)."""
        raise SandboxUnsupported(f"sandbox {self.spec.name}: this backend cannot switch a sandbox's network")

    async def exhausted_limits(self) -> list[str]:
        """Which of the sandbox's own limits its processes hit since it started or was last reset (memory
        at its limit with an OOM kill, forks refused at its pids limit, a full tmpfs), each with the
        kernel's counters as evidence; [] when none, or when the backend cannot tell (this default)."""
        return []

    def written_layer(self) -> tuple[Path, int] | None:
        """Where the host reads what was written in this sandbox's root since it started — an overlay upper
        layer (deletions as whiteouts) — and the uid its agent user's files have there; None where the backend
        has no such layer (this default), or it is out of reach (a sandbox reset since it started)."""
        return None

    async def apply_tree(self, data: bytes, *, remove: Sequence[str] = ()) -> None:
        """As root: remove each path of `remove` (like `rm -rf`), then extract the tar `data` at the root
        (root-owned, modes kept)."""
        steps = [f"rm -rf -- {shlex.join(remove)}"] if remove else []
        steps.append("tar -x --no-same-owner -p -C / -f -")
        await self._exec_checked(" && ".join(steps), "applying a kept state", stdin=data)

    def extra_uid(self, index: int) -> int:
        """The uid of the sandbox's `index`-th extra user (a shared slot's). This default is EXTRA_UID_BASE +
        index, the same in every sandbox; a backend that gives each sandbox uids of its own overrides it."""
        return EXTRA_UID_BASE + index

    async def run_verifier(
        self,
        argv: list[str],
        *,
        tests: bytes,
        output_file: str,
        user: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the command's own limit
    ) -> ExecResult:
        """Run a verifier program where the agent's surviving processes cannot reach it
        (Capability.PRIVATE_VERIFIER): `tests` (a tar) at /tests, a fresh /logs/verifier that `user` may write
        and a fresh /tmp, all its own; stdout and stderr to `output_file`. Every later read of
        /logs/verifier (`copy_out`, `download`, `read_file`) reads what this run wrote there."""
        raise SandboxUnsupported(f"sandbox {self.spec.name}: this backend has no private verifier places")

    async def spawn(
        self,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - a deadline for the process
        stdin: bytes = b"",
    ) -> StreamingProcess:
        """Start a long-lived process with streaming stdin/stdout/stderr (Capability.SPAWN)."""
        raise SandboxUnsupported(
            f"sandbox {self.spec.name}: this backend cannot run processes with streaming input and output"
        )

    # ---------------------------------------------------------------- defaults on top of exec
    async def _exec_checked(self, command: str, what: str, *, stdin: bytes | None = None) -> ExecResult:
        """A helper command as root with `HELPER_ENV` (never the trial's PATH); SandboxError naming `what`."""
        result = await self.exec(command, cwd="/", user="root", stdin=stdin, env=HELPER_ENV)
        if not result.ok:
            detail = result.stderr.strip()[-500:] or f"exit code {result.exit_code}"
            raise SandboxError(f"{what} failed: {detail}")
        return result

    async def shell(self, *, cwd: str | None = None, user: str | None = None) -> ShellSession:
        """A stateful shell session: cwd and exported variables persist between `run` calls."""
        from evsys.sandbox.shell import ExecShellSession

        user = user or self.spec.user
        return ExecShellSession(self, session_id=next(_SESSION_IDS), cwd=cwd or self.spec.workdir, user=user)

    async def upload(self, src: Path, dst: str) -> None:
        """Copy a host file or directory (recursively, keeping permissions) to `dst` inside the sandbox,
        owned by root."""
        src = Path(src)
        if not src.exists():
            raise SandboxError(f"upload source {src} does not exist")
        target = PurePosixPath(dst)
        target_dir, arcname = (target, ".") if src.is_dir() else (target.parent, target.name)
        data = await asyncio.to_thread(tar_of, src, arcname)
        q = shlex.quote(str(target_dir))
        command = f"mkdir -p {q} && tar -x --no-same-owner -p -C {q} -f -"
        await self._exec_checked(command, f"upload {src} -> {dst}", stdin=data)

    async def download(self, src: str, dst: Path) -> None:
        """Copy a file or directory from inside the sandbox to the host path `dst` (permissions kept, no
        link that leads outside `dst`)."""
        try:
            data = await self.download_tar(src)
        except SandboxError as exc:
            raise SandboxError(f"download {src} -> {dst} failed: {exc}") from None
        await asyncio.to_thread(extract_one, data, PurePosixPath(src).name, Path(dst))

    async def download_tar(self, src: str) -> bytes:
        """A tar holding the sandbox path `src` under its base name (like `tar -c -C dirname basename`),
        read as root; symlinks are kept as links."""
        path = PurePosixPath(src)
        if not path.is_absolute() or path.name in ("", "..", "."):
            raise SandboxError(f"download needs an absolute path below the root, got {src!r}")
        command = f"tar -c -C {shlex.quote(str(path.parent))} -f - -- {shlex.quote(path.name)}"
        return (await self._exec_checked(command, f"packing {src}")).stdout_bytes

    async def copy_out(
        self, src: str, limits: CopyOutLimits | None = None, *, first: Sequence[str] = ()
    ) -> CopiedTree:
        """Like `download_tar`, within `limits` (evsys's defaults fill what is not set), the `first` names
        (relative to `src`) packed ahead of the rest; what was cut is reported. This default bounds the copy
        on the host after `download_tar`; a backend that can stop packing inside the sandbox overrides it."""
        data = await self.download_tar(src)
        return await asyncio.to_thread(bound_tar, data, limits or CopyOutLimits(), first)

    async def read_file(self, path: str, max_bytes: int = 1 << 20) -> bytes:
        """The last `max_bytes` of a regular file in the sandbox (what `tail -c` gives), read as root;
        `SandboxError` when it is missing or not a regular file."""
        q = shlex.quote(path)
        command = f"test -f {q} && tail -c {int(max_bytes)} -- {q}"
        return (await self._exec_checked(command, f"reading {path}")).stdout_bytes

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
        """Write `data` to `path` (relative paths from `cwd`, default `spec.workdir`) as `user` (default
        `spec.user`), creating missing parent directories and replacing what was there; `mode` (e.g.
        0o755) sets its permission bits. Runs with that user's rights only (a root-owned place refuses the
        agent); `SandboxError` saying why when the file cannot be written."""
        result = await self.exec(
            write_file_command(path, mode), cwd=cwd, user=user, stdin=data, timeout=timeout, env=HELPER_ENV
        )
        if not result.ok:
            detail = result.stderr.strip()[-500:] or f"exit code {result.exit_code}"
            raise SandboxError(f"cannot write {path}: {detail}")

    async def replace_tree(
        self, data: bytes, dst: str, *, empty: Sequence[str] = (), mkdir: Sequence[str] = ()
    ) -> None:
        """As root: remove `dst`, empty each dir of `empty`, create each of `mkdir`, then extract the tar
        `data` at `dst` (root-owned, modes kept)."""
        q = shlex.quote
        steps = [f"rm -rf {q(dst)}"]
        clear = "find {0} -mindepth 1 -maxdepth 1 -exec rm -rf {{}} +"
        steps += [f"mkdir -p {q(d)} && " + clear.format(q(d)) for d in empty]
        steps += [f"mkdir -p {q(d)}" for d in (*mkdir, dst)]
        steps.append(f"tar -x --no-same-owner -p -C {q(dst)} -f -")
        await self._exec_checked(" && ".join(steps), f"placing files at {dst}", stdin=data)

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
        """Run a program (`argv[0]` looked up on PATH) with empty stdin. With `output_file`, its stdout and
        stderr go to that file inside the sandbox (created or truncated as `user`); else they come back as
        with `exec`."""
        if not argv or not all(isinstance(a, str) for a in argv) or not argv[0]:
            raise SandboxError(f"exec_program needs a non-empty argv of strings, got {argv!r}")
        command = "exec " + shlex.join(argv)
        if output_file is not None:
            command += f" > {shlex.quote(output_file)} 2>&1"
        return await self.exec(command + " < /dev/null", cwd=cwd, env=env, timeout=timeout, user=user)


def write_file_command(path: str, mode: int | None = None) -> str:
    """The shell command `Sandbox.write_file` runs: stdin into `path`, parents created, `mode` applied (for
    callers that must run it their own way, e.g. as a shared slot's uid)."""
    q = shlex.quote(path)
    command = f'mkdir -p -- "$(dirname -- {q})" && cat > {q}'
    if mode is not None:
        command += f" && chmod {int(mode):o} -- {q}"
    return command


_SESSION_IDS = itertools.count(1)
