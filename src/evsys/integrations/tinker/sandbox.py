"""evsys sandboxes for tinker-cookbook's `harbor_rl` recipe, in place of its Modal sandboxes.

The recipe (`tinker_cookbook.recipes.harbor_rl`) takes a `SandboxFactory`: an async callable
`(env_dir, timeout) -> SandboxInterface`, called once per environment of a group with the task's
`environment/` directory. `sandbox_factory()` returns one that loads the Harbor task around `env_dir`
with evsys's task loader, gets its image the way an evsys trial does (built from `environment/Dockerfile`,
pulled for `docker_image`, or the host-rootfs layer when the Dockerfile needs no build), and starts an
evsys sandbox on a backend from the registry (the local one by default: no Docker daemon).

    from tinker_cookbook.recipes.harbor_rl.harbor_env import HarborDatasetBuilder
    from evsys.integrations.tinker import sandbox_factory

    builder = HarborDatasetBuilder(tasks=tasks, ..., sandbox_factory=sandbox_factory())

`EvsysSandbox` is the `SandboxInterface` over one evsys `Sandbox`. Importing this module needs no
tinker-cookbook; creating a sandbox does (`pip install 'evsys[tinker]'`).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path, PurePosixPath
from typing import Any

from evsys.engine.image_services import ImageServices
from evsys.engine.trial.environment import sandbox_spec
from evsys.engine.trial.images import BUILD_LOG, image_spec, needs_image
from evsys.records import SandboxSpec
from evsys.sandbox.base import Sandbox, SandboxError
from evsys.sandbox.registry import DEFAULT_BACKEND, create_sandbox
from evsys.task.loader import load_task

DEFAULT_MAX_OUTPUT_BYTES = 128 * 1024  # what the recipe's Modal sandbox keeps per stream
TIMEOUT_EXIT_CODE = 124  # what coreutils' `timeout` returns for a command it stopped

TinkerSandboxFactory = Callable[[Path, int], Awaitable["EvsysSandbox"]]


def _tinker() -> Any:
    """tinker-cookbook's sandbox module, or an ImportError naming the extra."""
    try:
        from tinker_cookbook.sandbox import sandbox_interface
    except ImportError as exc:
        raise ImportError(
            "evsys.integrations.tinker needs tinker-cookbook: pip install 'evsys[tinker]'"
        ) from exc
    return sandbox_interface


class EvsysSandbox:
    """tinker-cookbook's `SandboxInterface` over one started evsys sandbox.

    Commands run with `bash -c` as the sandbox's default user (root from `sandbox_factory`),
    in `workdir` or the task's WORKDIR. A command past its timeout is killed with everything it started and
    reports exit code 124 (`metrics["timed_out"]`); output is kept up to `max_output_bytes` per stream
    (its beginning, as the Modal sandbox does). The sandbox lives at most `lifetime` seconds (the recipe's
    sandbox timeout); after that, or after `cleanup`, every call raises `SandboxTerminatedError`."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        lifetime: float | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> None:
        self._sandbox = sandbox
        self._max_output_bytes = max_output_bytes
        self._stopped = False
        self._expiry = asyncio.get_running_loop().call_later(lifetime, self._expire) if lifetime else None
        self._expiring: asyncio.Task[None] | None = None

    @property
    def sandbox_id(self) -> str:
        """The evsys sandbox's name (unique per sandbox)."""
        return self._sandbox.spec.name

    @property
    def sandbox(self) -> Sandbox:
        """The evsys sandbox underneath (for callers that want the full contract: upload, download...)."""
        return self._sandbox

    def _expire(self) -> None:
        self._expiring = asyncio.ensure_future(self.cleanup())
        # a failed stop at expiry is not anyone's call to raise into; the sandbox is given up either way
        self._expiring.add_done_callback(lambda task: task.cancelled() or task.exception())

    def _terminated(self, detail: str) -> Exception:
        error: type[Exception] = _tinker().SandboxTerminatedError
        return error(f"evsys sandbox {self.sandbox_id}: {detail}")

    def _result(self, stdout: bytes, stderr: bytes, code: int, cap: int, **metrics: Any) -> Any:
        result_type = _tinker().SandboxResult
        return result_type(
            stdout=stdout[:cap].decode("utf-8", "replace"),
            stderr=stderr[:cap].decode("utf-8", "replace"),
            exit_code=code,
            metrics=metrics,
        )

    async def _exec(
        self,
        command: str,
        *,
        workdir: str | None,
        timeout: float,  # noqa: ASYNC109 - the SandboxInterface signature
        stdin: bytes | None = None,
    ) -> Any:
        if self._stopped:
            raise self._terminated("the sandbox was cleaned up or outlived its lifetime")
        try:
            return await self._sandbox.exec(command, cwd=workdir, timeout=timeout, stdin=stdin)
        except SandboxError as exc:
            raise self._terminated(str(exc)) from exc

    async def send_heartbeat(self, timeout: int = 30) -> None:  # noqa: ASYNC109 - the SandboxInterface signature
        """Check that the sandbox still runs commands (`SandboxTerminatedError` otherwise)."""
        result = await self._exec("true", workdir="/", timeout=timeout)
        if not result.ok:
            raise self._terminated(f"the heartbeat failed (exit code {result.exit_code})")

    async def run_command(
        self,
        command: str,
        workdir: str | None = None,
        timeout: int = 60,  # noqa: ASYNC109 - the SandboxInterface signature
        max_output_bytes: int | None = None,
    ) -> Any:
        """Run a shell command; a `SandboxResult` with its output, exit code and timing."""
        cap = max_output_bytes if max_output_bytes is not None else self._max_output_bytes
        r = await self._exec(command, workdir=workdir, timeout=timeout)
        code = TIMEOUT_EXIT_CODE if r.timed_out else r.exit_code
        return self._result(
            r.stdout_bytes, r.stderr_bytes, code, cap, timed_out=r.timed_out, duration=r.duration
        )

    async def read_file(
        self,
        path: str,
        max_bytes: int | None = None,
        timeout: int = 60,  # noqa: ASYNC109 - the SandboxInterface signature
    ) -> Any:
        """A file's content as `stdout` (its first `max_bytes` when set); a non-zero exit code when it cannot
        be read."""
        q = shlex.quote(path)
        command = f"cat -- {q}" if max_bytes is None else f"head -c {int(max_bytes)} -- {q}"
        r = await self._exec(command, workdir="/", timeout=timeout)
        if r.stdout_truncated:
            raise SandboxError(f"read {path}: larger than the sandbox's output bound; pass max_bytes")
        code = TIMEOUT_EXIT_CODE if r.timed_out else r.exit_code
        return self._result(r.stdout_bytes, r.stderr_bytes, code, len(r.stdout_bytes) + len(r.stderr_bytes))

    async def write_file(
        self,
        path: str,
        content: str | bytes,
        executable: bool = False,
        timeout: int = 60,  # noqa: ASYNC109 - the SandboxInterface signature
    ) -> Any:
        """Write `content` to `path` (parents created; mode +x when `executable`)."""
        data = content.encode() if isinstance(content, str) else content
        q = shlex.quote(path)
        command = f"mkdir -p -- {shlex.quote(str(PurePosixPath(path).parent))} && cat > {q}"
        if executable:
            command += f" && chmod +x -- {q}"
        r = await self._exec(command, workdir="/", timeout=timeout, stdin=data)
        code = TIMEOUT_EXIT_CODE if r.timed_out else r.exit_code
        return self._result(r.stdout_bytes, r.stderr_bytes, code, self._max_output_bytes)

    async def cleanup(self) -> None:
        """Stop the sandbox and release everything it holds (idempotent)."""
        self._stopped = True
        if self._expiry is not None:
            self._expiry.cancel()
        await self._sandbox.stop()


async def start_task_sandbox(
    task_dir: Path,
    *,
    backend: str = DEFAULT_BACKEND,
    user: str = "root",
    build_timeout: float | None = None,
    scratch: Path | None = None,
) -> Sandbox:
    """A started evsys sandbox for the Harbor task at `task_dir`, on its image when it has one, with the
    network, limits, files, WORKDIR and ENV an evsys trial of it would get, commands running as `user`."""
    task = load_task(task_dir)
    spec: SandboxSpec = sandbox_spec(task, "tinker", task.name)
    if needs_image(task, skip_build=False, sandbox=backend):
        limit = build_timeout or task.config.environment.build_timeout_sec
        logs = scratch or Path(tempfile.gettempdir()) / "evsys-tinker"
        log = logs / spec.name / BUILD_LOG
        image = await ImageServices().task_image(task, log, pull_policy="missing", timeout=limit, notices=[])
        spec = image_spec(spec, task, image.spec)
    sandbox = create_sandbox(spec.model_copy(update={"user": user}), backend)
    try:
        await sandbox.start()
    except BaseException:
        with contextlib.suppress(Exception):
            await sandbox.stop()
        raise
    return sandbox


def sandbox_factory(
    *,
    backend: str = DEFAULT_BACKEND,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    build_timeout: float | None = None,
) -> TinkerSandboxFactory:
    """The `SandboxFactory` the `harbor_rl` recipe takes: `(env_dir, timeout) -> EvsysSandbox`, where
    `env_dir` is a Harbor task's `environment/` directory and `timeout` the sandbox's lifetime in seconds.

    Every command runs as root in the sandbox, as in the recipe's Modal sandbox: the recipe's grader runs
    `tests/test.sh` through the same interface and writes `/logs/verifier`. `backend` names an evsys
    sandbox backend (tested: 'local')."""
    _tinker()  # fail now, not at the first environment, when tinker-cookbook is missing

    async def make(env_dir: Path, timeout: int) -> EvsysSandbox:  # noqa: ASYNC109 - the lifetime
        sandbox = await start_task_sandbox(Path(env_dir).parent, backend=backend, build_timeout=build_timeout)
        return EvsysSandbox(sandbox, lifetime=timeout, max_output_bytes=max_output_bytes)

    return make
