"""`HarnessSandbox`: a sandbox prepared for a harness outside a trial, for the adapter tests.

The install tree and the proxy session's socket bound in, the forwarder running: the same `HarnessPlumbing`
`HarnessAgent` uses with a trial's sandbox (evsys.agent.harness.sandboxed), around a sandbox of its own."""

from __future__ import annotations

import contextlib
from typing import Any

from evsys.agent.harness.catalog import HarnessSetup
from evsys.agent.harness.config import ModelEndpoint
from evsys.agent.harness.install import HarnessInstall, HarnessInstaller
from evsys.agent.harness.sandboxed import HarnessPlumbing, SandboxLauncher, require_spawn
from evsys.model.proxy import ModelProxy, ProxySession
from evsys.records import SandboxSpec
from evsys.sandbox.base import Sandbox, SandboxError
from evsys.sandbox.local.rootfs import AGENT_HOME
from evsys.sandbox.registry import DEFAULT_BACKEND, create_sandbox


class HarnessSandbox:
    """A sandbox (of `backend`, from the registry) prepared for a harness: install tree and proxy socket bound
    in, forwarder running.

    ```python
    async with HarnessSandbox(proxy, SandboxSpec(name="t1"), install=DEFINITION.install) as hs:
        adapter = DEFINITION.build(hs.setup())
    ```"""

    def __init__(
        self,
        proxy: ModelProxy,
        spec: SandboxSpec,
        *,
        install: HarnessInstall | None = None,
        installer: HarnessInstaller | None = None,
        model: str | None = None,
        backend: str = DEFAULT_BACKEND,
    ) -> None:
        self.spec = spec
        self.backend = backend
        self.plumbing = HarnessPlumbing(proxy, install=install, installer=installer, model=model)
        self.install = install
        self.sandbox: Sandbox | None = None
        self.endpoint: ModelEndpoint | None = None
        self.launcher: SandboxLauncher | None = None
        self.bin_dir = install.bin_dir if install is not None else None
        self.home = AGENT_HOME

    @property
    def session(self) -> ProxySession:
        """The proxy session whose key the harness uses."""
        assert self.plumbing.session is not None
        return self.plumbing.session

    async def __aenter__(self) -> HarnessSandbox:
        try:
            binds = [*self.spec.binds, *await self.plumbing.binds()]
            self.sandbox = create_sandbox(self.spec.model_copy(update={"binds": binds}), self.backend)
            require_spawn(self.sandbox)
            await self.sandbox.start()
            self.endpoint = await self.plumbing.connect(self.sandbox)
        except BaseException:
            await self.close()
            raise
        self.launcher = SandboxLauncher(self.sandbox)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop the sandbox (every process in it) and close the session."""
        await self.plumbing.close()
        if self.sandbox is not None:
            with contextlib.suppress(SandboxError):
                await self.sandbox.stop()

    def setup(self, *, mcp: bool = False, session_timeout_s: float = 600.0, **options: Any) -> HarnessSetup:
        """The `HarnessSetup` for `HarnessDefinition.build` (with the MCP endpoint when `mcp`)."""
        assert self.launcher is not None and self.endpoint is not None, "enter the HarnessSandbox first"
        return self.plumbing.harness_setup(
            self.launcher,
            self.endpoint,
            workdir=self.spec.workdir,
            options=options,
            session_timeout_s=session_timeout_s,
            mcp=mcp,
        )
