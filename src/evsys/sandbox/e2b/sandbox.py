"""`E2BSandbox`: a sandbox on E2B (https://e2b.dev) through the official `e2b` SDK (the `e2b` extra), imported
only when such a sandbox is used.

Credentials and the service come from the SDK's own environment variables (`E2B_API_KEY`, `E2B_DOMAIN`, and
for a self-hosted or test service `E2B_API_URL`/`E2B_SANDBOX_URL`); evsys never reads or records them. E2B
runs templates: a task's `docker_image` becomes a template E2B builds from it (`from_image`, named after the
image and the spec's CPUs and memory, which a template fixes; built once per process, the service caches its
layers); a task without one starts from `$EVSYS_E2B_TEMPLATE` (default `base`), sized as that template was
built. `no-network` is E2B's `allow_internet_access=False`. Commands run through envd's process service as
root, files move through its file calls (see `evsys.sandbox.remote`). E2B has no pids limit, pods, reset in
place, network switch or private verifier places: those are refused up front (docs/cloud.md).

E2B pulls and builds images itself (`Capability.REMOTE_IMAGES`: evsys builds nothing here): a task's
Dockerfile becomes a template E2B builds (`from_dockerfile`; the SDK uploads the files its COPY/ADD lines
name from the Dockerfile's directory, the build context). An image evsys built locally is refused.
"""

from __future__ import annotations

import hashlib
import math
import os
from typing import Any, ClassVar

from evsys.records import ImageSpec, NetworkMode, SandboxSpec
from evsys.sandbox.base import SandboxError
from evsys.sandbox.remote.sandbox import RemoteSandbox, import_sdk

TEMPLATE_VAR = "EVSYS_E2B_TEMPLATE"
DEFAULT_TEMPLATE = "base"
LABEL_SANDBOX = "evsys.sandbox"
LIFETIME_SEC = 3600  # E2B kills a sandbox after this long (an orchestrator that died leaves nothing billed)
_built: set[str] = set()  # the templates this process has built


def sdk() -> Any:
    """The `e2b` module, or `SandboxError` telling how to install it."""
    return import_sdk("e2b", "E2B")


def template() -> str:
    """The E2B template sandboxes without an image start from."""
    return os.environ.get(TEMPLATE_VAR) or DEFAULT_TEMPLATE


def dockerfile_text(image: ImageSpec) -> str:
    """The content of `image`'s Dockerfile ("" for a registry image)."""
    return image.dockerfile.read_text() if image.dockerfile is not None else ""


def template_name(spec: SandboxSpec) -> str:
    """The name of the template built for `spec`'s image (its Dockerfile's place and content) and resources
    (the same for the same ones)."""
    assert spec.image is not None
    image = spec.image
    key = f"{image.ref}|{image.dockerfile}|{dockerfile_text(image)}|{spec.cpus}|{spec.memory_mb}"
    return f"evsys-{hashlib.sha256(key.encode()).hexdigest()[:20]}"


def template_of(image: ImageSpec) -> Any:
    """The SDK's template for `image`: its Dockerfile (its directory the context COPY lines upload from),
    else the registry image."""
    e2b = sdk()
    if image.dockerfile is None:
        return e2b.AsyncTemplate().from_image(image.ref)
    context = e2b.AsyncTemplate(file_context_path=image.dockerfile.parent)
    return context.from_dockerfile(dockerfile_text(image))


async def build_template(spec: SandboxSpec) -> str:
    """Build (once per process) the template for `spec`'s image with its CPUs and memory; its name."""
    e2b = sdk()
    name = template_name(spec)
    if name in _built:
        return name
    assert spec.image is not None
    await e2b.AsyncTemplate.build(
        template_of(spec.image),
        name,
        cpu_count=math.ceil(spec.cpus) if spec.cpus is not None else None,
        memory_mb=spec.memory_mb,
    )
    _built.add(name)
    return name


class E2BSandbox(RemoteSandbox):
    """A sandbox on E2B (see the module docstring)."""

    network_modes: ClassVar[frozenset[NetworkMode]] = frozenset({"no-network", "public"})
    service: ClassVar[str] = "E2B"

    def __init__(self, spec: SandboxSpec) -> None:
        super().__init__(spec)
        self._box: Any = None

    @classmethod
    async def unavailable(cls) -> str | None:
        """Why no E2B sandbox can be made from here: the SDK or the API key missing."""
        try:
            e2b = sdk()
        except SandboxError as exc:
            return str(exc)
        if not e2b.ConnectionConfig().api_key:
            return "the E2B SDK has no API key: set E2B_API_KEY"
        return None

    async def _create(self) -> None:
        e2b = sdk()
        try:
            name = template() if self.spec.image is None else await build_template(self.spec)
        except Exception as exc:
            raise SandboxError(f"sandbox {self.spec.name}: E2B could not build its template: {exc}") from None
        self._box = await e2b.AsyncSandbox.create(
            template=name,
            timeout=LIFETIME_SEC,
            metadata={LABEL_SANDBOX: self.spec.name},
            envs=dict(self.spec.env),
            allow_internet_access=self.spec.network == "public",
        )

    async def _delete(self) -> None:
        box, self._box = self._box, None
        if box is not None:
            await box.kill()

    async def _run(self, command: str, timeout: float) -> tuple[int, str]:  # noqa: ASYNC109
        e2b = sdk()
        try:
            result = await self._box.commands.run(command, user="root", cwd="/", timeout=timeout)
        except e2b.CommandExitException as exc:
            result = exc
        return int(result.exit_code), (result.stdout or "") + (result.stderr or "")

    async def _put(self, path: str, data: bytes) -> None:
        await self._box.files.write(path, data, user="root")

    async def _get(self, path: str) -> bytes:
        return bytes(await self._box.files.read(path, format="bytes", user="root"))
