"""`EvsysRuntime`: verifiers' (v1) `Runtime` contract over one evsys sandbox.

Every operation the ABC declares maps onto the evsys `Sandbox` contract: `run`/`run_program`/`open_process`
start a process with `Sandbox.spawn` (cancelling the caller kills the process and everything it started),
`read`/`write` move bytes with `Sandbox.exec`, `run_background` leaves a process running until `stop`,
`with_user` switches between the sandbox's `root` and `agent` users, `prepare_execution` applies verifiers'
network policy with `Sandbox.set_network`, and `host_url` makes the host's loopback services (the
interception server a harness calls the model through) reachable through a `LoopbackBridge`.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import AsyncIterator
from pathlib import PurePosixPath
from typing import ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import Field
from pydantic_config import BaseConfig
from verifiers.v1.configs.runtime import NetworkPolicyConfig, parse_network_rule
from verifiers.v1.errors import SandboxError as VfSandboxError
from verifiers.v1.runtimes.base import BaseRuntimeInfo, ProgramResult, Runtime, RuntimeProcess

from evsys.engine.image_services import ImageServices
from evsys.images import ImageError
from evsys.integrations.verifiers.bridge import LoopbackBridge
from evsys.records import ExecResult, ImageSpec, NetworkMode, SandboxSpec, marked_output
from evsys.sandbox.base import Capability, Sandbox, SandboxError, StreamingProcess
from evsys.sandbox.registry import DEFAULT_BACKEND, create_sandbox, sandbox_class

CHUNK = 64 * 1024
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class EvsysConfig(NetworkPolicyConfig, BaseConfig):
    """Where and how an `EvsysRuntime` sandbox runs (verifiers' runtime fields where they apply)."""

    type: Literal["evsys"] = "evsys"
    backend: str = Field(
        DEFAULT_BACKEND, description="The evsys sandbox backend ('local': no Docker daemon)."
    )
    image: str | None = Field(
        None,
        description="An OCI image reference; None: the host-rootfs layer (the host's /usr, read-only).",
    )
    workdir: str | None = Field(None, description="None: the task's workdir, the image's WORKDIR, or /app.")
    user: Literal["root", "agent"] = Field(
        "root",
        description="Who runs commands unless `with_user` says otherwise (root, as in containers).",
    )
    cpu: float | None = Field(None, description="CPU cores (cgroup quota); None: unlimited.")
    memory: float | None = Field(None, description="Memory limit in GB; None: unlimited.")
    disk: float | None = Field(
        None, description="Writable filesystem size in GB; None: evsys's default (1 GB)."
    )
    max_output_mb: int = Field(
        64, description="Largest command output or file `read` kept, per stream, in MiB."
    )


class EvsysRuntimeInfo(EvsysConfig, BaseRuntimeInfo):
    """What a trace records about the box it ran in."""


class EvsysProcess(RuntimeProcess):
    """A live process in the sandbox (`Sandbox.spawn`), with verifiers' process interface."""

    def __init__(self, process: StreamingProcess) -> None:
        self._process = process
        self.stdout = _chunks(process.stdout)
        self.stderr = _chunks(process.stderr)

    async def write(self, data: bytes) -> None:
        """Write to the process's stdin."""
        self._process.stdin.write(data)
        await self._process.stdin.drain()

    async def wait(self) -> int:
        """Wait for the process to exit; its exit code."""
        return await self._process.wait()

    async def poll(self) -> int | None:
        """The exit code, or None while it runs."""
        return self._process.returncode

    async def terminate(self) -> None:
        """Kill the process and everything it started: the sandbox contract has no gentler signal."""
        await self._process.kill()

    async def kill(self) -> None:
        """Kill the process and everything it started."""
        await self._process.kill()


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while chunk := await reader.read(CHUNK):
        yield chunk


async def _bounded(reader: asyncio.StreamReader, limit: int) -> str:
    """A stream read to its end, decoded; past `limit` bytes only counted (memory stays bounded whatever a
    command prints), with evsys's truncation marker where the rest was dropped."""
    kept, total = bytearray(), 0
    async for chunk in _chunks(reader):
        total += len(chunk)
        kept += chunk[: max(0, limit - len(kept))]
    return marked_output(bytes(kept), total, len(kept))


class EvsysRuntime(Runtime):
    """verifiers' `Runtime` on an evsys sandbox (local backend by default: bubblewrap, no Docker daemon)."""

    supports_user: ClassVar[bool] = True

    def __init__(self, config: EvsysConfig | None = None, name: str | None = None) -> None:
        super().__init__(name)
        self.config = config or EvsysConfig()
        self.info = EvsysRuntimeInfo(**self.config.model_dump())
        self.sandbox: Sandbox | None = None
        self.bridge: LoopbackBridge | None = None
        self._pending: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start the sandbox (pulling the configured image first, when there is one)."""
        try:
            spec = await self._spec()
            sandbox_type = sandbox_class(self.config.backend)
        except (ImageError, SandboxError) as exc:
            raise VfSandboxError(f"evsys runtime {self.name}: {exc}") from exc
        if sandbox_type.supports(Capability.BINDS) and sandbox_type.supports(Capability.SPAWN):
            self.bridge = LoopbackBridge()
            spec = spec.model_copy(update={"binds": self.bridge.binds()})
        self.sandbox = create_sandbox(spec, self.config.backend)
        try:
            await self.sandbox.start()
        except SandboxError as exc:
            raise VfSandboxError(f"evsys sandbox {spec.name} did not start: {exc}") from exc
        self.info.id = spec.name

    async def _spec(self) -> SandboxSpec:
        cfg = self.config
        image: ImageSpec | None = None
        if cfg.image:
            service = ImageServices().service()
            stored, _ = await service.ensure_ref(cfg.image)
            image = await service.storage.spec(stored)
        workdir = cfg.workdir or (image.config.workdir if image is not None else None) or "/app"
        return SandboxSpec(
            name=self.name,
            workdir=workdir,
            network="public",  # setup is trusted with egress; prepare_execution narrows it for the agent
            cpus=cfg.cpu,
            memory_mb=None if cfg.memory is None else int(cfg.memory * 1024),
            storage_mb=None if cfg.disk is None else int(cfg.disk * 1024),
            user=cfg.user,
            image=image,
            max_output_bytes=cfg.max_output_mb << 20,
        )

    async def teardown(self) -> None:
        """Stop the sandbox (every process in it) and the loopback bridge."""
        for task in self._pending:
            task.cancel()
        if self.bridge is not None:
            await self.bridge.close()
        if self.sandbox is not None:
            await self.sandbox.stop()

    def cleanup(self) -> None:
        """At interpreter exit: the sandbox dies with this process (bubblewrap's --die-with-parent); only the
        bridge's socket directory is left to remove."""
        if self.bridge is not None:
            self.bridge.remove()

    def _running(self) -> Sandbox:
        if self.sandbox is None or self.stopped:
            raise VfSandboxError(f"evsys runtime {self.name} is not running")
        return self.sandbox

    async def _ready(self) -> Sandbox:
        """The sandbox, once every loopback port `host_url` asked for answers inside it."""
        sandbox = self._running()
        pending, self._pending = self._pending, []
        for task in pending:
            await task
        return sandbox

    # ------------------------------------------------------------------ processes
    async def _spawn(self, argv: list[str], env: dict[str, str]) -> StreamingProcess:
        sandbox = await self._ready()
        try:
            return await sandbox.spawn(list(argv), env=self.process_env(env), user=self.user)
        except SandboxError as exc:
            raise VfSandboxError(f"evsys runtime {self.name}: {exc}") from exc

    async def run(self, argv: list[str], env: dict[str, str]) -> ProgramResult:
        """Run `argv` to completion; a cancelled caller kills it and everything it started."""
        process = await self._spawn(argv, env)
        try:
            process.stdin.close()
            limit = self.config.max_output_mb << 20
            out, err, code = await asyncio.gather(
                _bounded(process.stdout, limit), _bounded(process.stderr, limit), process.wait()
            )
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.shield(process.kill())
            raise
        return ProgramResult(code, out, err)

    async def open_process(self, argv: list[str], env: dict[str, str]) -> RuntimeProcess:
        """A live process with streaming stdin/stdout/stderr."""
        return EvsysProcess(await self._spawn(argv, env))

    async def run_background(self, argv: list[str], env: dict[str, str], log: str) -> None:
        """Start `argv` with its output in `log`; it runs until the runtime stops."""
        q = shlex.quote(log)  # created before returning, as verifiers' subprocess runtime does
        script = f": > {q} && {{ nohup {shlex.join(argv)} >> {q} 2>&1 < /dev/null & }}"
        result = await self._exec(script, env=self.process_env(env))
        if not result.ok:
            raise VfSandboxError(f"background process failed to start: {result.stderr.strip()[-500:]}")

    # ------------------------------------------------------------------ files
    async def _exec(
        self, command: str, *, env: dict[str, str] | None = None, stdin: bytes | None = None
    ) -> ExecResult:
        sandbox = await self._ready()
        try:
            return await sandbox.exec(command, env=env, user=self.user, stdin=stdin)
        except SandboxError as exc:
            raise VfSandboxError(f"evsys runtime {self.name}: {exc}") from exc

    async def _read(self, path: str, max_bytes: int | None = None) -> bytes:
        q = shlex.quote(path)
        command = f"cat -- {q}" if max_bytes is None else f"head -c {int(max_bytes)} -- {q}"
        result = await self._exec(command)
        if not result.ok:
            raise VfSandboxError(f"read {path!r}: {result.stderr.strip()[-500:]}")
        if result.stdout_truncated:
            raise VfSandboxError(
                f"read {path!r}: over the runtime's {self.config.max_output_mb} MiB output bound"
            )
        return result.stdout_bytes

    async def write(self, path: str, data: bytes) -> None:
        """Write `data` to `path` (relative to the workdir), creating its parents."""
        q = shlex.quote(path)
        parent = shlex.quote(str(PurePosixPath(path).parent))
        result = await self._exec(f"mkdir -p -- {parent} && cat > {q}", stdin=data)
        if not result.ok:
            raise VfSandboxError(f"write {path!r}: {result.stderr.strip()[-500:]}")

    # ------------------------------------------------------------------ network
    def host_url(self, url: str) -> str:
        """A host loopback URL keeps its address: the port is relayed into the sandbox (LoopbackBridge)."""
        parts = urlsplit(url)
        if parts.hostname not in LOOPBACK_HOSTS or parts.port is None:
            return url
        if self.bridge is None:
            raise VfSandboxError(
                f"evsys backend {self.config.backend!r} cannot bind sockets into a sandbox: {url} unreachable"
            )
        self._pending.append(asyncio.ensure_future(self.bridge.expose(self._running(), parts.port)))
        return url.replace(parts.netloc, f"127.0.0.1:{parts.port}", 1)

    async def prepare_execution(self, routes: list[str] | None) -> None:
        """Apply the network policy for the agent phase (`routes`: the host services it must reach, relayed
        by the bridge whatever the policy); None: back to the setup phase's open network."""
        sandbox = await self._ready()
        for route in routes or ():
            self.host_url(route)
        await self._ready()
        if not self.network_restricted:
            return
        mode, hosts = ("public", []) if routes is None else self._policy()
        try:
            await sandbox.set_network(mode, hosts)
        except SandboxError as exc:
            raise VfSandboxError(f"evsys runtime {self.name}: network policy: {exc}") from exc

    def _policy(self) -> tuple[NetworkMode, list[str]]:
        """verifiers' allow/block rules as an evsys network mode: [] no-network, host names allowlist."""
        cfg = self.config
        if cfg.block and cfg.block != ["*"]:
            raise VfSandboxError("evsys runtime: block lists are not supported (an allow list of hosts is)")
        if not cfg.allow:
            return "no-network", []
        hosts = []
        for rule in cfg.allow:
            parsed, host, port = parse_network_rule(rule)
            if "*" in host or port is not None or parsed.scheme or not host:
                raise VfSandboxError(
                    f"evsys runtime: allow rule {rule!r}: only plain host names are supported"
                )
            hosts.append(host)
        return "allowlist", hosts

    async def expose(self, port: int) -> str:
        """Not supported: a server inside an evsys sandbox is not published to the host."""
        raise VfSandboxError("evsys runtime: publishing a port from the sandbox to the host is not supported")
