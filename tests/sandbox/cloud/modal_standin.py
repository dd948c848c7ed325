"""A stand-in for Modal's service, written for evsys's tests. It follows Modal's gRPC API as the `modal` SDK
ships it (`modal_proto`): the control plane's `modal.client.ModalClient` service (`ClientHello`,
`AuthTokenGet`, `EnvironmentGetOrCreate`, `AppGetOrCreate`, `ImageGetOrCreate`, `SandboxCreateV2`,
`SandboxGetCommandRouterAccess`, `SandboxTerminateV2`, checked against the `x-modal-token-id`/`-secret` the
SDK sends and the auth token it was given) and a worker's `TaskCommandRouter` service (`TaskExecStart`,
`TaskExecStdinWrite`, `TaskExecStdioRead`, `TaskExecPoll`, `TaskExecWait`, checked against the task's
bearer JWT), both served by grpclib on one 127.0.0.1 port (modal_standin_services.py); every other call
answers UNIMPLEMENTED.

Each Modal sandbox is one of evsys's local sandboxes: its `milli_cpu`/`memory_mb` are its CPUs and memory,
its network access its network mode (BLOCKED: `no-network`, OPEN: `public`, ALLOWLIST: `allowlist` with the
allowed domains and CIDRs), each exec one process spawned in it as root. It builds no images: an image with
a Dockerfile line other than `FROM`, or whose `FROM` names an image it was not told to serve from the host's
root file system, fails its build, with the reason in Modal's `GenericResult`.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import secrets
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from grpclib import GRPCError
from grpclib.const import Status
from grpclib.server import Server
from modal_proto import api_pb2

from evsys.records import NetworkMode, SandboxSpec
from evsys.sandbox.base import SandboxError, StreamingProcess
from evsys.sandbox.local.sandbox import LocalSandbox

BUILDER_VERSION = "2025.06"
_names = itertools.count()


def jwt(claims: dict[str, Any]) -> str:
    """An unsigned JWT with `claims` (the SDK reads `exp` only)."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}.stand-in"


@dataclass
class Exec:
    """One exec: its process, its output so far (and which streams ended), its stdin written so far."""

    process: StreamingProcess
    output: dict[int, bytearray] = field(default_factory=lambda: {1: bytearray(), 2: bytearray()})
    closed: set[int] = field(default_factory=set)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    stdin_offset: int = 0
    pumps: list[asyncio.Future[None]] = field(default_factory=list)

    async def output_after(self, fd: int, offset: int) -> tuple[bytes, bool]:
        """The stream's output after `offset` once there is some (or it ended), and whether it ended."""
        async with self.changed:
            await self.changed.wait_for(lambda: len(self.output[fd]) > offset or fd in self.closed)
            return bytes(self.output[fd][offset:]), fd in self.closed


@dataclass
class Box:
    """A Modal sandbox: its task, the JWT its router calls carry, the local sandbox, its execs."""

    sandbox_id: str
    task_id: str
    token: str
    local: LocalSandbox
    execs: dict[str, Exec] = field(default_factory=dict)


@dataclass
class ModalStandin:
    """The stand-in's state: the token it accepts, its apps, images and sandboxes, what it was asked."""

    token_id: str
    token_secret: str
    host_images: frozenset[str] = frozenset()
    router_url: str = ""
    auth_token: str = field(default_factory=lambda: jwt({"exp": time.time() + 3600, "sub": "stand-in"}))
    apps: dict[str, str] = field(default_factory=dict)  # name -> app id
    images: dict[str, api_pb2.GenericResult] = field(default_factory=dict)  # image id -> build result
    boxes: dict[str, Box] = field(default_factory=dict)  # sandbox id -> box
    created: list[api_pb2.SandboxCreateV2Request] = field(default_factory=list)
    built: list[api_pb2.Image] = field(default_factory=list)
    running_execs: int = 0
    peak_execs: int = 0  # the most execs running at once (across every sandbox)

    def box_for_task(self, task_id: str, metadata: Any) -> Box:
        """The box of a router call (its task and bearer JWT); UNAUTHENTICATED or NOT_FOUND otherwise."""
        box = next((b for b in self.boxes.values() if b.task_id == task_id), None)
        if box is None:
            raise GRPCError(Status.NOT_FOUND, f"task {task_id} not found")
        if metadata.get("authorization") != f"Bearer {box.token}":
            raise GRPCError(Status.UNAUTHENTICATED, "invalid command router token")
        return box

    def check_credentials(self, metadata: Any, *, auth_token: bool = False) -> None:
        """UNAUTHENTICATED unless the call carries the token (and, for V2 calls, the issued auth token)."""
        if (metadata.get("x-modal-token-id"), metadata.get("x-modal-token-secret")) != (
            self.token_id,
            self.token_secret,
        ):
            raise GRPCError(Status.UNAUTHENTICATED, "Token ID or secret is invalid")
        if auth_token and metadata.get("x-modal-auth-token") != self.auth_token:
            raise GRPCError(Status.UNAUTHENTICATED, "missing or invalid auth token")

    def build(self, image: api_pb2.Image) -> api_pb2.GenericResult:
        """The result of "building" an image: only a `FROM` of a served host image (or of a built image)."""
        self.built.append(image)
        bases = {base.docker_tag: base.image_id for base in image.base_images}
        for command in image.dockerfile_commands:
            words = command.split()
            if not words or words[0].startswith("#"):
                continue
            if words[0].upper() != "FROM":
                return _failure(f"the stand-in builds nothing but FROM lines, not {command!r}")
            ref = words[1]
            if ref in self.host_images or bases.get(ref) in self.images:
                continue
            return _failure(f"the stand-in cannot build from {ref!r}")
        return api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_SUCCESS)

    def built_lines(self, since: int = 0) -> list[str]:
        """Every Dockerfile line of the images asked for since the `since`-th (blank ones left out)."""
        return [line for image in self.built[since:] for line in image.dockerfile_commands if line.strip()]

    async def create(self, request: api_pb2.SandboxCreateV2Request) -> Box:
        """Start a local sandbox for the definition; FAILED_PRECONDITION when that is impossible."""
        self.created.append(request)
        definition = request.definition
        result = self.images.get(definition.image_id)
        if result is None or result.status != api_pb2.GenericResult.GENERIC_STATUS_SUCCESS:
            raise GRPCError(Status.NOT_FOUND, f"image {definition.image_id} not found or not built")
        network, hosts = _network(definition.network_access)
        resources = definition.resources
        spec = SandboxSpec(
            name=f"modal-standin-{next(_names)}-{uuid.uuid4().hex[:8]}",
            workdir="/",
            user="agent",
            network=network,
            allowed_hosts=hosts,
            cpus=resources.milli_cpu / 1000 or None,
            memory_mb=resources.memory_mb or None,
            max_output_bytes=256 << 20,
        )
        local = LocalSandbox(spec)
        try:
            await local.start()
        except SandboxError as exc:
            raise GRPCError(Status.FAILED_PRECONDITION, str(exc)) from None
        box = Box(f"sb-{uuid.uuid4().hex[:20]}", f"ta-{uuid.uuid4().hex[:20]}", "", local)
        box.token = jwt({"exp": time.time() + 3600, "task_id": box.task_id})
        self.boxes[box.sandbox_id] = box
        return box

    async def count_while_running(self, process: StreamingProcess) -> None:
        """Count `process` among the running execs until it exits."""
        self.running_execs += 1
        self.peak_execs = max(self.peak_execs, self.running_execs)
        try:
            await process.wait()
        finally:
            self.running_execs -= 1

    async def terminate(self, sandbox_id: str) -> None:
        """Stop the sandbox and every exec in it; NOT_FOUND for an unknown one."""
        box = self.boxes.pop(sandbox_id, None)
        if box is None:
            raise GRPCError(Status.NOT_FOUND, f"sandbox {sandbox_id} not found")
        for running in box.execs.values():
            await running.process.kill()
        await box.local.stop()

    async def stop_all(self) -> None:
        """Stop every sandbox still running (the stand-in shutting down)."""
        for sandbox_id in list(self.boxes):
            await self.terminate(sandbox_id)


def _failure(reason: str) -> api_pb2.GenericResult:
    return api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_FAILURE, exception=reason)


def _network(access: api_pb2.NetworkAccess) -> tuple[NetworkMode, list[str]]:
    kind = access.network_access_type
    if kind == api_pb2.NetworkAccess.NetworkAccessType.BLOCKED:
        return "no-network", []
    if kind == api_pb2.NetworkAccess.NetworkAccessType.ALLOWLIST:
        cidrs = [cidr.removesuffix("/32") for cidr in access.allowed_cidrs]
        return "allowlist", [*access.allowed_domains, *cidrs]
    return "public", []


@contextmanager
def serve_standin(standin: ModalStandin) -> Iterator[str]:
    """Serve both services on one free 127.0.0.1 port in a thread; yields the server URL (MODAL_SERVER_URL,
    and the command router's URL)."""
    loop = asyncio.new_event_loop()
    servers: list[Server] = []
    started = threading.Event()

    async def start() -> None:
        from modal_standin_services import CommandRouter, ControlPlane

        servers.append(Server([ControlPlane(standin), CommandRouter(standin)]))
        await servers[0].start("127.0.0.1", 0)

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if not started.wait(30):
        raise RuntimeError("the Modal stand-in did not start")
    server = servers[0]
    port = server._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = standin.router_url = f"http://127.0.0.1:{port}"
    try:
        yield url
    finally:
        asyncio.run_coroutine_threadsafe(standin.stop_all(), loop).result(timeout=120)

        async def close() -> None:
            server.close()
            await server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)


def new_standin(host_images: frozenset[str]) -> ModalStandin:
    """A stand-in with fresh credentials."""
    return ModalStandin(
        token_id=f"ak-{secrets.token_hex(8)}",
        token_secret=f"as-{secrets.token_hex(16)}",
        host_images=host_images,
    )
