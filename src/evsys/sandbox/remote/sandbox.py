"""`RemoteSandbox`: the `Sandbox` contract for a hosted sandbox service that can run a command line as root
and move whole files (Daytona, E2B, Modal).

A subclass names its service (`service`), creates and deletes the service's sandbox (`_create`, `_delete`)
and provides three calls: `_run` (a command line as root, its combined text output and exit code back),
`_put` and `_get` (a file's bytes). Everything else is built here: an image evsys built locally is refused
up front (the service pulls and builds images itself and cannot pull this machine's), the service's
failures become `SandboxError`s naming the sandbox and what failed, commands run through
`scripts.run_command` (stdout and stderr apart and byte-exact, bounded inside the sandbox, the user dropped
with `setpriv`), a timeout kills the command's whole process tree with a second call, `kill_processes`
spares the service's own processes, and tars and stdin travel as files.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import secrets
import shlex
import time
from abc import abstractmethod
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from evsys.records import ExecResult, SandboxSpec
from evsys.sandbox.base import Capability, Sandbox, SandboxError
from evsys.sandbox.remote import scripts
from evsys.util.tarsafe import tar_of

INLINE_COMMAND_MAX = 64 * 1024  # longer commands travel as a file (a command line has a size limit)
SERVICE_GRACE_SEC = 60  # how much longer than the command the service's own timeout allows
NO_TIMEOUT_SEC = 24 * 3600  # the service's timeout for a command without one


def import_sdk(module: str, service: str) -> Any:
    """The service's SDK `module` (installed by the evsys extra of the same name), or `SandboxError` telling
    how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise SandboxError(
            f"the {module} backend needs the {service} SDK: pip install 'evsys[{module}]'"
        ) from None


class RemoteSandbox(Sandbox):
    """A sandbox on a hosted service (see the module docstring)."""

    # The service runs a task's image, pulling or building it itself (never one only this machine has).
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.IMAGES, Capability.REMOTE_IMAGES})
    service: ClassVar[str]  # the service's name as its users know it ("Modal"), in evsys's messages
    checked_in_preflight: ClassVar[bool] = True  # the SDK and its credentials, read locally

    def __init__(self, spec: SandboxSpec) -> None:
        super().__init__(spec)
        self._running = False
        self._extra_uid_base: int | None = None

    @classmethod
    def unsupported(cls, spec: SandboxSpec) -> str | None:
        """Besides the base checks: an image evsys built locally (one with a `source` in its own storage and
        no Dockerfile for the service to build) is one the service cannot pull."""
        problem = super().unsupported(spec)
        image = spec.image
        if problem is None and image is not None and image.source is not None and image.dockerfile is None:
            return f"image {image.ref!r} was built locally; push it to a registry {cls.service} can pull from"
        return problem

    # ---------------------------------------------------------------- what a service provides
    @abstractmethod
    async def _create(self) -> None:
        """Create and start the service's sandbox; any exception carries the service's reason (a
        `SandboxError` is passed on as it is, others are named as the service failing to create it)."""

    @abstractmethod
    async def _delete(self) -> None:
        """Delete the service's sandbox (called once, after a successful `_create`); any exception carries the
        service's reason."""

    @abstractmethod
    async def _run(self, command: str, timeout: float) -> tuple[int, str]:  # noqa: ASYNC109
        """Run a shell command line as root in `/`; its exit code and its (combined) text output."""

    @abstractmethod
    async def _put(self, path: str, data: bytes) -> None:
        """Write `data` to the absolute `path` in the sandbox (as root); any exception carries the reason."""

    @abstractmethod
    async def _get(self, path: str) -> bytes:
        """The bytes of the file at the absolute `path` in the sandbox; any exception carries the reason."""

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Create the sandbox, then the agent user, the trial directories and the spec's files."""
        if self._running:
            raise SandboxError(f"sandbox {self.spec.name} is already started")
        try:
            await self._create()
        except SandboxError:
            raise
        except Exception as exc:
            raise SandboxError(
                f"sandbox {self.spec.name}: {self.service} could not create it: {exc}"
            ) from None
        self._running = True
        try:
            prepared = await self._root(scripts.prepare(self.spec.workdir), "preparing the sandbox")
            self._extra_uid_base = scripts.extra_uid_base(prepared)
            for copy in self.spec.files:
                await self._put_tree(Path(copy.src), copy.dst, copy.exclude)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Delete the sandbox (and everything in it). Idempotent; fine before `start`."""
        if not self._running:
            return
        self._running = False
        try:
            await asyncio.shield(self._delete())
        except Exception as exc:
            raise SandboxError(
                f"sandbox {self.spec.name}: {self.service} could not delete it: {exc}"
            ) from None

    def extra_uid(self, index: int) -> int:
        """The uid of the sandbox's `index`-th extra user (a shared slot's): the ones after the agent's when
        the image has no user with them, else EXTRA_UID_BASE + index (`scripts.prepare`)."""
        self._require_running()
        if not 0 <= index < scripts.EXTRA_UIDS or self._extra_uid_base is None:
            raise SandboxError(
                f"sandbox {self.spec.name}: no extra uid {index} (0..{scripts.EXTRA_UIDS - 1})"
            )
        return self._extra_uid_base + index

    def _require_running(self) -> None:
        if not self._running:
            raise SandboxError(f"sandbox {self.spec.name} is not running")

    async def _root(self, command: str, what: str) -> str:
        """A command line of evsys's own as root; its output, or `SandboxError` naming `what`."""
        self._require_running()
        code, output = await self._run(command, NO_TIMEOUT_SEC)
        if code != 0:
            raise SandboxError(f"sandbox {self.spec.name}: {what} failed: {output.strip()[-500:]}")
        return output

    async def _write(self, path: str, data: bytes) -> None:
        """`_put`, its failure a `SandboxError` naming the file."""
        try:
            await self._put(path, data)
        except Exception as exc:
            raise SandboxError(f"sandbox {self.spec.name}: writing {path} failed: {exc}") from None

    async def _read(self, path: str) -> bytes:
        """`_get`, its failure a `SandboxError` naming the file."""
        try:
            return await self._get(path)
        except Exception as exc:
            raise SandboxError(f"sandbox {self.spec.name}: reading {path} failed: {exc}") from None

    # ---------------------------------------------------------------- commands
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
        """Run `command` with `bash -c` as `user`; a timeout kills its whole process tree, keeping the output
        so far."""
        self._require_running()
        token = secrets.token_hex(8)
        if stdin is not None:
            await self._write(f"{scripts.RUN_DIR}/{token}.in", stdin)
        inline = command
        if len(command.encode()) > INLINE_COMMAND_MAX:
            await self._write(f"{scripts.RUN_DIR}/{token}.cmd", command.encode())
            inline = ""
        line = scripts.run_command(
            token,
            inline,
            user=user or self.spec.user,
            cwd=cwd or self.spec.workdir,
            env={**self.spec.env, **(env or {})},
            cap=self.spec.max_output_bytes,
        )
        started = time.monotonic()
        service_timeout = (timeout + SERVICE_GRACE_SEC) if timeout is not None else NO_TIMEOUT_SEC
        run = asyncio.ensure_future(self._run(line, service_timeout))
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(run), timeout)
        except TimeoutError:
            timed_out = True
            await self._kill_tree(token)
        except asyncio.CancelledError:
            await self._kill_tree(token)
            run.cancel()
            raise
        try:
            _, text = await run
        except Exception as exc:
            raise SandboxError(f"sandbox {self.spec.name}: exec failed: {exc}") from None
        return self._result(text, timed_out, time.monotonic() - started, user or self.spec.user)

    def _result(self, text: str, timed_out: bool, duration: float, user: str) -> ExecResult:
        try:
            out = scripts.parse_result(text, self.spec.max_output_bytes)
        except scripts.UnknownUser:
            raise SandboxError(f"sandbox {self.spec.name}: no user {user!r} in the sandbox") from None
        if out is None:
            raise SandboxError(f"sandbox {self.spec.name}: the command's result was lost: {text[-500:]}")
        return ExecResult(
            stdout_bytes=out.stdout,
            stderr_bytes=out.stderr,
            stdout_total_bytes=out.stdout_total,
            stdout_head_bytes=out.stdout_head,
            stderr_total_bytes=out.stderr_total,
            stderr_head_bytes=out.stderr_head,
            exit_code=-9 if timed_out else out.status,
            timed_out=timed_out,
            duration=duration,
        )

    async def _kill_tree(self, token: str) -> None:
        with contextlib.suppress(Exception):
            await asyncio.shield(self._run(scripts.kill_tree(token), NO_TIMEOUT_SEC))

    async def kill_processes(self) -> int:
        """Kill every process but the service's own; return how many there were."""
        output = await self._root(scripts.kill_all(), "killing the sandbox's processes")
        try:
            return int(output.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return 0

    # ---------------------------------------------------------------- files, as whole files
    async def _put_tree(self, src: Path, dst: str, exclude: tuple[str, ...] = ()) -> None:
        """Copy a host file or directory to `dst` (modes kept, owned by root) as one tar file."""
        target_dir, data = await asyncio.to_thread(_pack, src, dst, exclude)
        archive = f"{scripts.RUN_DIR}/{secrets.token_hex(8)}.tar"
        await self._write(archive, data)
        q = shlex.quote(str(target_dir))
        unpack = (
            f"mkdir -p {q} && tar -x --no-same-owner -p -C {q} -f {archive}; s=$?; rm -f {archive}; exit $s"
        )
        await self._root(shlex.join(["/bin/bash", "-c", unpack]), f"copying {src} to {dst}")

    async def upload(self, src: Path, dst: str) -> None:
        """Copy a host file or directory to `dst` inside the sandbox (modes kept, owned by root)."""
        await self._put_tree(Path(src), dst)

    async def download_tar(self, src: str) -> bytes:
        """A tar holding the sandbox path `src` under its base name, packed inside and fetched as a file."""
        path = PurePosixPath(src)
        if not path.is_absolute() or path.name in ("", "..", "."):
            raise SandboxError(f"download needs an absolute path below the root, got {src!r}")
        archive = f"{scripts.RUN_DIR}/{secrets.token_hex(8)}.tar"
        pack = shlex.join(["tar", "-c", "-C", str(path.parent), "-f", archive, "--", path.name])
        try:
            await self._root(shlex.join(["/bin/bash", "-c", pack]), f"packing {src}")
            return await self._read(archive)
        finally:
            with contextlib.suppress(Exception):
                await self._run(f"rm -f {archive}", NO_TIMEOUT_SEC)


def _pack(src: Path, dst: str, exclude: tuple[str, ...]) -> tuple[PurePosixPath, bytes]:
    """The directory to unpack in and a tar of `src` for it (a directory's contents, or the file as `dst`)."""
    if not src.exists():
        raise SandboxError(f"upload source {src} does not exist")
    target = PurePosixPath(dst)
    target_dir, arcname = (target, ".") if src.is_dir() else (target.parent, target.name)
    return target_dir, tar_of(src, arcname, exclude)
