"""Running a harness in a sandbox: the process launcher, and the plumbing to the proxy and the install tree.

`SandboxLauncher` starts harness processes in a running sandbox (`Sandbox.spawn`), as the unprivileged agent
user. `HarnessPlumbing` is what one harness run needs around its sandbox:

1. `binds()` before the sandbox starts: the cached install tree read-only at its prefix, the proxy session's
   own unix socket at `/run/evsys/proxy.sock` and the stdlib forwarder script at `/run/evsys/forwarder.py`;
2. `connect(sandbox)` after it started: spawns the forwarder (loopback TCP in the sandbox's own network
   namespace -> the session socket) and returns the `ModelEndpoint` the harness is pointed at;
3. `close()`: closes the session (its key is refused from then on) and removes the socket.

`HarnessAgent` (`evsys run -a`, `evsys serve --harness`) uses the plumbing with the trial's own sandbox.
Harness processes stream, so the backend must declare `Capability.SPAWN` (and `Capability.BINDS` for the
install tree and proxy socket); `require_spawn` says so clearly (`SpawnUnsupported`) when it does not."""

from __future__ import annotations

import asyncio
import shlex
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evsys.agent.harness.adapter import McpEndpoint
from evsys.agent.harness.catalog import HarnessSetup
from evsys.agent.harness.config import ModelEndpoint
from evsys.agent.harness.install import HarnessInstall, HarnessInstaller
from evsys.agent.harness.process import BASE_ENV
from evsys.records import Bind, CausedError, FailureCause
from evsys.sandbox.base import HELPER_ENV, Capability, Sandbox, SandboxError, StreamingProcess
from evsys.sandbox.local.rootfs import AGENT_HOME

if TYPE_CHECKING:
    from evsys.model.proxy import ModelProxy, ProxySession
    from evsys.task.models import McpServerConfig

RUN_DIR = "/run/evsys"
PROXY_SOCKET = f"{RUN_DIR}/proxy.sock"
FORWARDER = f"{RUN_DIR}/forwarder.py"
FORWARDER_START_TIMEOUT = 15.0


class SpawnUnsupported(CausedError, RuntimeError):
    """The sandbox backend cannot stream processes, which a harness needs (cause `environment_unsupported`:
    retrying on the same backend cannot help)."""

    failure_cause = FailureCause.ENVIRONMENT_UNSUPPORTED


def require_spawn(sandbox: Sandbox) -> None:
    """Raise `SpawnUnsupported` unless `sandbox`'s backend can stream processes (harnesses need it)."""
    if not sandbox.supports(Capability.SPAWN):
        raise SpawnUnsupported(
            f"external agent harnesses need a sandbox backend that can stream processes (spawn); "
            f"{type(sandbox).__name__} cannot"
        )


class SandboxLauncher:
    """A `ProcessLauncher` for a started sandbox: processes run as `user` with only the given environment."""

    def __init__(self, sandbox: Sandbox, *, user: str = "agent") -> None:
        require_spawn(sandbox)
        self.sandbox = sandbox
        self.user = user

    async def launch(self, argv: list[str], *, env: dict[str, str], cwd: str) -> StreamingProcess:
        """Start `argv` in the sandbox (BASE_ENV + `env` on top of the sandbox's defaults)."""
        try:
            return await self.sandbox.spawn(list(argv), env={**BASE_ENV, **env}, cwd=cwd, user=self.user)
        except SandboxError as exc:
            raise OSError(f"cannot start {argv[0]!r} in the sandbox: {exc}") from exc

    async def write_file(self, path: str, data: bytes) -> None:
        """Write `data` to `path` inside the sandbox as the launcher's user (parent directories created)."""
        try:
            await self.sandbox.write_file(path, data, user=self.user, cwd="/", timeout=30)
        except SandboxError as exc:
            raise OSError(f"{exc} (in the sandbox)") from exc

    async def read_file(self, path: str) -> bytes | None:
        """The bytes of `path` in the sandbox (read as the launcher's user), or None if unreadable; OSError
        when it is larger than the sandbox returns from one command (`SandboxSpec.max_output_bytes`)."""
        command = f"cat -- {shlex.quote(path)}"
        result = await self.sandbox.exec(command, cwd="/", user=self.user, timeout=30, env=HELPER_ENV)
        if result.stdout_truncated:
            raise OSError(
                f"{path} in the sandbox is {result.stdout_total_bytes:,} bytes, more than one command "
                f"returns ({len(result.stdout_bytes):,}); raise SandboxSpec.max_output_bytes to read it"
            )
        return result.stdout_bytes if result.ok else None

    async def run(self, command: str, *, cwd: str = "/", timeout: float = 30) -> str:  # noqa: ASYNC109
        """Run a short helper command (e.g. find a harness's log file); its stdout, '' on failure."""
        result = await self.sandbox.exec(command, cwd=cwd, user=self.user, timeout=timeout, env=HELPER_ENV)
        return result.stdout if result.ok else ""


def _forwarder_source() -> Path:
    import evsys.model.proxy.forwarder as forwarder

    return Path(forwarder.__file__)


class HarnessPlumbing:
    """The proxy session, its socket and the install tree of one harness run (see the module docstring)."""

    def __init__(
        self,
        proxy: ModelProxy,
        *,
        install: HarnessInstall | None = None,
        installer: HarnessInstaller | None = None,
        model: str | None = None,
        session: ProxySession | None = None,
    ) -> None:
        self.proxy = proxy
        self.install = install
        self.installer = installer or HarnessInstaller()
        self.model = model
        self.session = session
        self.forwarder: StreamingProcess | None = None
        self._dir: Path | None = None

    async def binds(self) -> list[Bind]:
        """Install (cached) and open the session socket; the binds the sandbox must start with."""
        binds = []
        if self.install is not None:
            binds.append(await self.installer.bind(self.install))
        if self.session is None:
            self.session = self.proxy.open_session()
        from evsys.sandbox.local.sandbox import default_scratch_root

        root = default_scratch_root() / "sessions"
        await asyncio.to_thread(root.mkdir, parents=True, exist_ok=True)
        self._dir = Path(
            await asyncio.to_thread(tempfile.mkdtemp, prefix=f"{uuid.uuid4().hex[:8]}-", dir=root)
        )
        socket_path = await self.proxy.open_session_socket(self.session, self._dir / "proxy.sock")
        binds.append(Bind(src=socket_path, dst=PROXY_SOCKET))
        binds.append(Bind(src=_forwarder_source(), dst=FORWARDER))
        return binds

    async def connect(self, sandbox: Sandbox) -> ModelEndpoint:
        """Start the forwarder in the (started) sandbox; the endpoint the harness should use."""
        assert self.session is not None, "call binds() before starting the sandbox"
        require_spawn(sandbox)
        argv = ["/usr/bin/python3", "-I", FORWARDER, "--uds", PROXY_SOCKET, "--listen", "127.0.0.1:0"]
        self.forwarder = await sandbox.spawn(argv, cwd="/", user="agent")
        try:
            line = await asyncio.wait_for(self.forwarder.stdout.readline(), FORWARDER_START_TIMEOUT)
        except TimeoutError:
            line = b""
        text = line.decode("utf-8", "replace").strip()
        if not text.startswith("listening "):
            await self.forwarder.kill()
            err = (await self.forwarder.stderr.read()).decode("utf-8", "replace").strip()[-500:]
            raise SandboxError(
                f"the model forwarder did not start in the sandbox: {text or err or 'no output'}"
            )
        port = int(text.rpartition(":")[2])
        model = self.model or self.session.model_client.model
        return ModelEndpoint(f"http://127.0.0.1:{port}", self.session.key, model, self.session)

    def mcp_endpoint(self, endpoint: ModelEndpoint) -> McpEndpoint:
        """Where the harness reaches the session's MCP server (through the same forwarder)."""
        from evsys.agent.harness.mcp_server import mcp_endpoint_for

        return mcp_endpoint_for(endpoint)

    def harness_setup(
        self,
        launcher: SandboxLauncher,
        endpoint: ModelEndpoint,
        *,
        workdir: str,
        options: dict[str, Any],
        session_timeout_s: float,
        mcp: bool = False,
        mcp_servers: list[McpServerConfig] | None = None,
    ) -> HarnessSetup:
        """The `HarnessSetup` an adapter is built from (the MCP endpoint included when `mcp`; the task's
        `mcp_servers` for the harness's MCP configuration)."""
        return HarnessSetup(
            launcher=launcher,
            endpoint=endpoint,
            bin_dir=self.install.bin_dir if self.install is not None else "/usr/bin",
            workdir=workdir,
            home=AGENT_HOME,
            mcp=self.mcp_endpoint(endpoint) if mcp else None,
            mcp_servers=list(mcp_servers or []),
            options=dict(options),
            session_timeout_s=session_timeout_s,
        )

    async def close(self) -> None:
        """Stop the forwarder, close the session (its key is refused from now on), remove the socket."""
        if self.forwarder is not None:
            await self.forwarder.kill()
            self.forwarder = None
        if self.session is not None:
            self.proxy.close_session(self.session.key)
        if self._dir is not None:
            await asyncio.to_thread(shutil.rmtree, self._dir, True)
            self._dir = None
