"""`ModalSandbox`: a sandbox on Modal (https://modal.com) through the official `modal` SDK (the `modal`
extra), imported only when such a sandbox is used, and always through its async interface (`.aio`).

Credentials and the service come from the SDK's own configuration (`MODAL_TOKEN_ID`/`MODAL_TOKEN_SECRET` or
`~/.modal.toml`, `MODAL_SERVER_URL`, `MODAL_ENVIRONMENT`); evsys never reads or records them. Sandboxes
belong to the Modal app `$EVSYS_MODAL_APP` (default `evsys`, created when missing). The sandbox runs the
task's `docker_image` (`Image.from_registry`) or its Dockerfile (`Image.from_dockerfile`): Modal pulls and
builds them itself (`Capability.REMOTE_IMAGES`: evsys builds nothing here, and refuses an image it built),
or `$EVSYS_MODAL_BASE_IMAGE` (default `debian:bookworm-slim`) without one; `cpus` and
`memory_mb` are Modal's CPU and memory requests, `no-network` is `block_network`, `allowlist` Modal's
outbound domain (and, for addresses, CIDR) allowlist. Commands run through `Sandbox.exec` as root, files
move through an exec's stdin and stdout (see `evsys.sandbox.remote`). Modal has no pids or disk limit,
pods, reset in place, network switch or private verifier places: those are refused up front or not
enforced (docs/cloud.md).
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import os
from typing import Any, ClassVar

from evsys.records import NetworkMode, SandboxSpec
from evsys.sandbox.base import SandboxError
from evsys.sandbox.remote.sandbox import RemoteSandbox, import_sdk

APP_VAR = "EVSYS_MODAL_APP"
DEFAULT_APP = "evsys"
BASE_IMAGE_VAR = "EVSYS_MODAL_BASE_IMAGE"
DEFAULT_BASE_IMAGE = "debian:bookworm-slim"
LABEL_SANDBOX = "evsys.sandbox"
LIFETIME_SEC = 24 * 3600  # Modal's longest sandbox lifetime
IDLE_SEC = 3600  # a sandbox whose orchestrator died (no exec for an hour) is terminated
STDIN_CHUNK = 4 << 20  # bytes per stdin write (Modal buffers up to 16 MiB)


def sdk() -> Any:
    """The `modal` module, or `SandboxError` telling how to install it."""
    return import_sdk("modal", "Modal")


def network_options(spec: SandboxSpec) -> dict[str, Any]:
    """`Sandbox.create`'s network options for `spec`: blocked, open, or an outbound allowlist."""
    if spec.network == "no-network":
        return {"block_network": True}
    if spec.network == "public":
        return {}
    domains, cidrs = [], []
    for host in spec.allowed_hosts:
        try:
            cidrs.append(str(ipaddress.ip_network(host, strict=False)))
        except ValueError:
            domains.append(host)
    return {"outbound_domain_allowlist": domains, "outbound_cidr_allowlist": cidrs}


def image(spec: SandboxSpec) -> Any:
    """The Modal image the sandbox runs: the spec's Dockerfile (built by Modal, its directory the context)
    or registry image, else the configured base image."""
    modal = sdk()
    if spec.image is not None and spec.image.dockerfile is not None:
        return modal.Image.from_dockerfile(spec.image.dockerfile, context_dir=spec.image.dockerfile.parent)
    ref = spec.image.ref if spec.image is not None else os.environ.get(BASE_IMAGE_VAR) or DEFAULT_BASE_IMAGE
    return modal.Image.from_registry(ref)


class ModalSandbox(RemoteSandbox):
    """A sandbox on Modal (see the module docstring)."""

    network_modes: ClassVar[frozenset[NetworkMode]] = frozenset({"no-network", "public", "allowlist"})
    service: ClassVar[str] = "Modal"

    def __init__(self, spec: SandboxSpec) -> None:
        super().__init__(spec)
        self._box: Any = None

    @classmethod
    async def unavailable(cls) -> str | None:
        """Why no Modal sandbox can be made from here: the SDK or the credentials missing."""
        try:
            modal = sdk()
        except SandboxError as exc:
            return str(exc)
        settings = modal.config.config
        if not (settings.get("token_id") and settings.get("token_secret")) and not settings.get(
            "oauth_refresh_token"
        ):
            return (
                "the Modal SDK has no token: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, or write them to "
                f"{modal.config.user_config_path} with `modal token set` (the file $MODAL_CONFIG_PATH names, "
                "else ~/.modal.toml)"
            )
        return None

    async def _create(self) -> None:
        modal = sdk()
        app = await modal.App.lookup.aio(os.environ.get(APP_VAR) or DEFAULT_APP, create_if_missing=True)
        self._box = await modal.Sandbox.create.aio(
            app=app,
            image=image(self.spec),
            cpu=self.spec.cpus,
            memory=self.spec.memory_mb,
            timeout=LIFETIME_SEC,
            idle_timeout=IDLE_SEC,
            tags={LABEL_SANDBOX: self.spec.name},
            **network_options(self.spec),
        )

    async def _delete(self) -> None:
        box, self._box = self._box, None
        if box is not None:
            await box.terminate.aio()

    async def _exec(
        self,
        argv: list[str],
        timeout: float,  # noqa: ASYNC109 - the service's limit for the command
        stdin: bytes | None = None,
    ) -> tuple[int, bytes, bytes]:
        """Run `argv` as root in `/` (`stdin` written and closed when given): exit code, stdout, stderr."""
        limit = None if timeout >= LIFETIME_SEC else max(1, math.ceil(timeout))  # None: the sandbox's own
        process = await self._box.exec.aio(*argv, workdir="/", timeout=limit, text=False)
        if stdin is not None:
            for start in range(0, len(stdin), STDIN_CHUNK):
                process.stdin.write(stdin[start : start + STDIN_CHUNK])
                await process.stdin.drain.aio()
            process.stdin.write_eof()
            await process.stdin.drain.aio()
        stdout, stderr, code = await asyncio.gather(
            process.stdout.read.aio(), process.stderr.read.aio(), process.wait.aio()
        )
        return code, stdout, stderr

    async def _run(self, command: str, timeout: float) -> tuple[int, str]:  # noqa: ASYNC109
        try:
            code, stdout, stderr = await self._exec(["/bin/bash", "-c", command], timeout)
        except Exception as exc:
            raise SandboxError(f"sandbox {self.spec.name}: Modal could not run a command: {exc}") from None
        return code, (stdout + stderr).decode("utf-8", "replace")

    async def _put(self, path: str, data: bytes) -> None:
        code, _, stderr = await self._exec(["/bin/bash", "-c", 'cat > "$1"', "put", path], 3600, data)
        if code != 0:
            raise OSError(stderr.decode("utf-8", "replace")[-500:])

    async def _get(self, path: str) -> bytes:
        code, stdout, stderr = await self._exec(["cat", "--", path], 3600)
        if code != 0:
            raise OSError(stderr.decode("utf-8", "replace")[-500:])
        return bytes(stdout)
