"""`DaytonaSandbox`: a sandbox on Daytona (https://daytona.io) through the official `daytona` SDK (the
`daytona` extra), imported only when such a sandbox is used.

Credentials and the service come from the SDK's own environment variables (`DAYTONA_API_KEY`, or
`DAYTONA_JWT_TOKEN` with `DAYTONA_ORGANIZATION_ID`; `DAYTONA_API_URL`, `DAYTONA_TARGET`); evsys never reads
or records them. The sandbox runs the task's `docker_image` (Daytona builds `FROM <image>`) or its
Dockerfile (`Image.from_dockerfile`: the SDK uploads the files its COPY/ADD lines name, from inside the
Dockerfile's directory only, and Daytona builds it) — `Capability.REMOTE_IMAGES`: evsys builds nothing here,
and refuses an image it built locally, which the service cannot pull —, or Daytona's default snapshot;
`cpus`/`memory_mb`/`storage_mb` become Daytona's whole-core and GiB resources (rounded up), `no-network`
Daytona's `network_block_all`. Commands run through the toolbox's process call as root, files move through
its file calls (see `evsys.sandbox.remote`). Daytona has no pids limit, pods, reset in place, network switch
or private verifier places: those are refused up front (docs/cloud.md).
"""

from __future__ import annotations

import asyncio
import math
import os
from typing import Any, ClassVar

from evsys.records import ImageSpec, NetworkMode, SandboxSpec
from evsys.sandbox.base import SandboxError
from evsys.sandbox.remote.sandbox import RemoteSandbox, import_sdk

LABEL_SANDBOX = "evsys.sandbox"
AUTO_STOP_MINUTES = 60  # a sandbox whose orchestrator died stops (and is deleted) after an idle hour
CREATE_TIMEOUT_SEC = 600.0
# The image of a sandbox with resources but no task image (Daytona sizes only sandboxes built from an image).
BASE_IMAGE_VAR = "EVSYS_DAYTONA_BASE_IMAGE"
DEFAULT_BASE_IMAGE = "debian:bookworm-slim"


def sdk() -> Any:
    """The `daytona` module, or `SandboxError` telling how to install it."""
    return import_sdk("daytona", "Daytona")


def resources(spec: SandboxSpec) -> Any:
    """Daytona's resources for `spec` (whole cores, GiB, rounded up), or None for the service's defaults."""
    if spec.cpus is None and spec.memory_mb is None and spec.storage_mb is None:
        return None

    def up(value: float | None, unit: int = 1) -> int | None:
        return None if value is None else max(1, math.ceil(value / unit))

    return sdk().Resources(cpu=up(spec.cpus), memory=up(spec.memory_mb, 1024), disk=up(spec.storage_mb, 1024))


def image_of(image: ImageSpec) -> Any:
    """What Daytona builds the sandbox from: the task's Dockerfile (its context confined to the Dockerfile's
    directory), else the registry image's reference."""
    if image.dockerfile is None:
        return image.ref
    return sdk().Image.from_dockerfile(image.dockerfile, strict_context=True)


class DaytonaSandbox(RemoteSandbox):
    """A sandbox on Daytona (see the module docstring)."""

    network_modes: ClassVar[frozenset[NetworkMode]] = frozenset({"no-network", "public"})
    service: ClassVar[str] = "Daytona"

    def __init__(self, spec: SandboxSpec) -> None:
        super().__init__(spec)
        self._client: Any = None
        self._box: Any = None

    @classmethod
    async def unavailable(cls) -> str | None:
        """Why no Daytona sandbox can be made from here: the SDK or the credentials missing."""
        try:
            daytona = sdk()
        except SandboxError as exc:
            return str(exc)
        try:
            client = daytona.AsyncDaytona()
        except daytona.DaytonaAuthenticationError:
            return (
                "the Daytona SDK has no credentials: set DAYTONA_API_KEY (or DAYTONA_JWT_TOKEN and "
                "DAYTONA_ORGANIZATION_ID) in the environment or in ./.env or ./.env.local"
            )
        except Exception as exc:
            return f"the Daytona SDK is not configured: {exc}"
        await client.close()
        return None

    def _params(self) -> Any:
        daytona = sdk()
        common: dict[str, Any] = {
            "name": self.spec.name[:63],
            "os_user": "root",
            "env_vars": dict(self.spec.env),
            "labels": {LABEL_SANDBOX: self.spec.name},
            "network_block_all": self.spec.network == "no-network",
            "auto_stop_interval": AUTO_STOP_MINUTES,
            "auto_delete_interval": 0,  # deleted as soon as it stops
        }
        if self.spec.image is not None:
            return daytona.CreateSandboxFromImageParams(
                image=image_of(self.spec.image), resources=resources(self.spec), **common
            )
        if resources(self.spec) is not None:  # the default snapshot's resources are fixed
            return daytona.CreateSandboxFromImageParams(
                image=os.environ.get(BASE_IMAGE_VAR) or DEFAULT_BASE_IMAGE,
                resources=resources(self.spec),
                **common,
            )
        return daytona.CreateSandboxFromSnapshotParams(**common)

    async def _create(self) -> None:
        daytona = sdk()
        try:
            self._client = daytona.AsyncDaytona()
            self._box = await self._client.create(self._params(), timeout=CREATE_TIMEOUT_SEC)
        except BaseException:  # failed, or cancelled while the service creates it: its HTTP sessions close
            await asyncio.shield(self._close_client())
            raise

    async def _delete(self) -> None:
        box, self._box = self._box, None
        try:
            if box is not None:
                await box.delete()
        finally:
            await self._close_client()

    async def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    async def _run(self, command: str, timeout: float) -> tuple[int, str]:  # noqa: ASYNC109
        response = await self._box.process.exec(command, cwd="/", timeout=math.ceil(timeout))
        return int(response.exit_code if response.exit_code is not None else -1), response.result or ""

    async def _put(self, path: str, data: bytes) -> None:
        await self._box.fs.upload_file(data, path)

    async def _get(self, path: str) -> bytes:
        return bytes(await self._box.fs.download_file(path))
