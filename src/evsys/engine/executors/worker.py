"""What a worker process keeps between the trials it runs, whichever executor started it.

`TrialRuntime` holds the process's model clients (one per model string and base URL, built from the spec the
first time), a sandbox pool per backend and its image services, and hands each trial its `TrialResources`.
The Ray worker (evsys.engine.executors.ray_worker) and the local process worker
(evsys.engine.executors.process_worker) build on it; the driver's process never uses it (it lends the job's
own pool, clients and image services).
"""

from __future__ import annotations

import asyncio

from evsys.engine.image_services import ImageServices
from evsys.engine.run import TrialResources, build_model_client, needs_model
from evsys.engine.spec import TrialSpec
from evsys.model.base import ModelClient, close_model_client
from evsys.sandbox.pool import SandboxPool

MAX_IDLE_SANDBOXES = 4


class TrialRuntime:
    """Model clients by model string and a sandbox pool per backend, kept for the life of the process."""

    def __init__(
        self, *, reuse_sandboxes: bool = True, max_idle: int = MAX_IDLE_SANDBOXES, warm: int = 0
    ) -> None:
        self.reuse_sandboxes = reuse_sandboxes
        self.max_idle = max_idle if reuse_sandboxes else 0
        self.warm = warm
        self.clients: dict[tuple[str | None, str | None], ModelClient | None] = {}
        self.pools: dict[str, SandboxPool] = {}
        self._client_lock: asyncio.Lock | None = None
        self.images = ImageServices()  # the process's image services, shared by its trials

    async def prepare_backend(self, backend: str) -> None:
        """Called before each trial on `backend` (a subclass checks its node once, say); nothing here."""

    async def resources(self, spec: TrialSpec) -> TrialResources:
        """The pool and model client the trial of `spec` borrows (built on first use)."""
        await self.prepare_backend(spec.sandbox)
        return TrialResources(
            pool=self.pool(spec.sandbox), model_client=await self.client(spec), images=self.images
        )

    def pool(self, backend: str) -> SandboxPool:
        """This process's sandbox pool for `backend`."""
        if backend not in self.pools:
            self.pools[backend] = SandboxPool.for_backend(backend, max_idle=self.max_idle, warm=self.warm)
        return self.pools[backend]

    async def client(self, spec: TrialSpec) -> ModelClient | None:
        """The model client for the spec's model string (None when its agent talks to no model)."""
        if not needs_model(spec):
            return None
        agent = spec.config.agent
        key = (agent.model, agent.base_url)
        self._client_lock = self._client_lock or asyncio.Lock()
        async with self._client_lock:
            if key not in self.clients:
                self.clients[key] = await asyncio.to_thread(build_model_client, spec)
        return self.clients[key]

    async def close(self) -> None:
        """Stop idle sandboxes and close the model clients."""
        pools, self.pools = list(self.pools.values()), {}
        for pool in pools:
            await pool.close()
        clients, self.clients = list(self.clients.values()), {}
        for client in clients:
            await close_model_client(client)
