"""The two gRPC services of the Modal stand-in (modal_standin.py), on the generated grpclib bases the `modal`
SDK ships: the control plane's `modal.client.ModalClient` and a worker's `TaskCommandRouter`. Only the calls
the SDK makes to create, use and terminate a sandbox are implemented; every other call answers
UNIMPLEMENTED."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from google.protobuf import empty_pb2
from grpclib import GRPCError
from grpclib.const import Status
from grpclib.server import Stream
from modal_proto import api_pb2
from modal_proto import task_command_router_pb2 as sr_pb2
from modal_proto.api_grpc import ModalClientBase
from modal_proto.task_command_router_grpc import TaskCommandRouterBase
from modal_standin import BUILDER_VERSION, Exec, ModalStandin

from evsys.sandbox.base import SandboxError


def unimplemented(base: type) -> type:
    """`base` (a generated grpclib service base) with every call answering UNIMPLEMENTED."""

    async def refuse(self: Any, stream: Stream[Any, Any]) -> None:
        raise GRPCError(Status.UNIMPLEMENTED, "not implemented by the Modal stand-in")

    return type(f"Unimplemented{base.__name__}", (base,), dict.fromkeys(base.__abstractmethods__, refuse))


class ControlPlane(unimplemented(ModalClientBase)):  # type: ignore[misc]
    """The `modal.client.ModalClient` calls the SDK makes to create, use and terminate a sandbox."""

    def __init__(self, standin: ModalStandin) -> None:
        self.standin = standin

    async def ClientHello(self, stream: Stream[empty_pb2.Empty, api_pb2.ClientHelloResponse]) -> None:
        await stream.recv_message()
        self.standin.check_credentials(stream.metadata)
        await stream.send_message(api_pb2.ClientHelloResponse(image_builder_version=BUILDER_VERSION))

    async def AuthTokenGet(self, stream: Stream[Any, api_pb2.AuthTokenGetResponse]) -> None:
        await stream.recv_message()
        self.standin.check_credentials(stream.metadata)
        await stream.send_message(api_pb2.AuthTokenGetResponse(token=self.standin.auth_token))

    async def EnvironmentGetOrCreate(
        self, stream: Stream[Any, api_pb2.EnvironmentGetOrCreateResponse]
    ) -> None:
        request = await stream.recv_message()
        assert request is not None
        self.standin.check_credentials(stream.metadata)
        settings = api_pb2.EnvironmentSettings(image_builder_version=BUILDER_VERSION)
        name = request.deployment_name or "main"
        metadata = api_pb2.EnvironmentMetadata(name=name, settings=settings)
        await stream.send_message(
            api_pb2.EnvironmentGetOrCreateResponse(environment_id=f"en-{name}", metadata=metadata)
        )

    async def AppGetOrCreate(
        self, stream: Stream[api_pb2.AppGetOrCreateRequest, api_pb2.AppGetOrCreateResponse]
    ) -> None:
        request = await stream.recv_message()
        assert request is not None
        self.standin.check_credentials(stream.metadata)
        apps = self.standin.apps
        if request.app_name not in apps:
            if request.object_creation_type != api_pb2.OBJECT_CREATION_TYPE_CREATE_IF_MISSING:
                raise GRPCError(Status.NOT_FOUND, f"App '{request.app_name}' not found")
            apps[request.app_name] = f"ap-{uuid.uuid4().hex[:20]}"
        await stream.send_message(api_pb2.AppGetOrCreateResponse(app_id=apps[request.app_name]))

    async def ImageGetOrCreate(
        self, stream: Stream[api_pb2.ImageGetOrCreateRequest, api_pb2.ImageGetOrCreateResponse]
    ) -> None:
        request = await stream.recv_message()
        assert request is not None
        self.standin.check_credentials(stream.metadata)
        image_id = f"im-{uuid.uuid4().hex[:20]}"
        result = self.standin.images[image_id] = self.standin.build(request.image)
        metadata = api_pb2.ImageMetadata(image_builder_version=BUILDER_VERSION)
        await stream.send_message(
            api_pb2.ImageGetOrCreateResponse(image_id=image_id, result=result, metadata=metadata)
        )

    async def SandboxCreateV2(
        self, stream: Stream[api_pb2.SandboxCreateV2Request, api_pb2.SandboxCreateV2Response]
    ) -> None:
        request = await stream.recv_message()
        assert request is not None
        self.standin.check_credentials(stream.metadata, auth_token=True)
        box = await self.standin.create(request)
        access = api_pb2.CommandRouterAccess(url=self.standin.router_url, jwt=box.token)
        await stream.send_message(
            api_pb2.SandboxCreateV2Response(
                sandbox_id=box.sandbox_id, task_id=box.task_id, command_router_access=access
            )
        )

    async def SandboxGetCommandRouterAccess(
        self,
        stream: Stream[
            api_pb2.SandboxGetCommandRouterAccessRequest, api_pb2.SandboxGetCommandRouterAccessResponse
        ],
    ) -> None:
        request = await stream.recv_message()
        assert request is not None
        self.standin.check_credentials(stream.metadata, auth_token=True)
        box = self.standin.boxes.get(request.sandbox_id) or next(
            (b for b in self.standin.boxes.values() if b.task_id == request.task_id), None
        )
        if box is None:
            raise GRPCError(Status.NOT_FOUND, "sandbox not found")
        await stream.send_message(
            api_pb2.SandboxGetCommandRouterAccessResponse(url=self.standin.router_url, jwt=box.token)
        )

    async def SandboxTerminateV2(
        self, stream: Stream[api_pb2.SandboxTerminateRequest, api_pb2.SandboxTerminateResponse]
    ) -> None:
        request = await stream.recv_message()
        assert request is not None
        self.standin.check_credentials(stream.metadata, auth_token=True)
        await self.standin.terminate(request.sandbox_id)
        await stream.send_message(api_pb2.SandboxTerminateResponse())


class CommandRouter(unimplemented(TaskCommandRouterBase)):  # type: ignore[misc]
    """A worker's `TaskCommandRouter` calls the SDK makes to run a command and move its stdio."""

    def __init__(self, standin: ModalStandin) -> None:
        self.standin = standin

    def _exec(self, task_id: str, exec_id: str, metadata: Any) -> Exec:
        running = self.standin.box_for_task(task_id, metadata).execs.get(exec_id)
        if running is None:
            raise GRPCError(Status.NOT_FOUND, f"exec {exec_id} not found")
        return running

    async def TaskExecStart(
        self, stream: Stream[sr_pb2.TaskExecStartRequest, sr_pb2.TaskExecStartResponse]
    ) -> None:
        request = await stream.recv_message()
        assert request is not None
        box = self.standin.box_for_task(request.task_id, stream.metadata)
        if request.exec_id not in box.execs:  # the exec id is also the call's idempotency key
            env = {s.env_var: s.value for s in request.secret_sources if s.HasField("env_var")} or None
            try:
                process = await box.local.spawn(
                    list(request.command_args),
                    user="root",
                    cwd=request.workdir or "/",
                    env=env,
                    timeout=request.timeout_secs or None,
                )
            except SandboxError as exc:
                raise GRPCError(Status.FAILED_PRECONDITION, str(exc)) from None
            running = box.execs[request.exec_id] = Exec(process)
            running.pumps = [
                asyncio.ensure_future(_pump(running, fd, reader))
                for fd, reader in ((1, process.stdout), (2, process.stderr))
            ]
            running.pumps.append(asyncio.ensure_future(self.standin.count_while_running(process)))
        await stream.send_message(sr_pb2.TaskExecStartResponse())

    async def TaskExecStdinWrite(
        self, stream: Stream[sr_pb2.TaskExecStdinWriteRequest, sr_pb2.TaskExecStdinWriteResponse]
    ) -> None:
        request = await stream.recv_message()
        assert request is not None
        running = self._exec(request.task_id, request.exec_id, stream.metadata)
        new = request.data[max(0, running.stdin_offset - request.offset) :]  # a retried write adds nothing
        stdin = running.process.stdin
        try:
            if new:
                stdin.write(new)
                running.stdin_offset = request.offset + len(request.data)
                await stdin.drain()
            if request.eof:
                stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            raise GRPCError(Status.FAILED_PRECONDITION, "the process closed its stdin") from None
        await stream.send_message(sr_pb2.TaskExecStdinWriteResponse())

    async def TaskExecStdioRead(
        self, stream: Stream[sr_pb2.TaskExecStdioReadRequest, sr_pb2.TaskExecStdioReadResponse]
    ) -> None:
        request = await stream.recv_message()
        assert request is not None
        running = self._exec(request.task_id, request.exec_id, stream.metadata)
        fd = 1 if request.file_descriptor == sr_pb2.TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT else 2
        sent = request.offset
        while True:
            data, done = await running.output_after(fd, sent)
            if data:
                await stream.send_message(sr_pb2.TaskExecStdioReadResponse(data=data))
                sent += len(data)
            elif done:
                return

    async def TaskExecPoll(
        self, stream: Stream[sr_pb2.TaskExecPollRequest, sr_pb2.TaskExecPollResponse]
    ) -> None:
        request = await stream.recv_message()
        assert request is not None
        running = self._exec(request.task_id, request.exec_id, stream.metadata)
        code = running.process.returncode
        await stream.send_message(
            sr_pb2.TaskExecPollResponse(code=code) if code is not None else sr_pb2.TaskExecPollResponse()
        )

    async def TaskExecWait(
        self, stream: Stream[sr_pb2.TaskExecWaitRequest, sr_pb2.TaskExecWaitResponse]
    ) -> None:
        request = await stream.recv_message()
        assert request is not None
        running = self._exec(request.task_id, request.exec_id, stream.metadata)
        code = await running.process.wait()
        await stream.send_message(sr_pb2.TaskExecWaitResponse(code=code))


async def _pump(running: Exec, fd: int, reader: asyncio.StreamReader) -> None:
    """Collect one output stream of an exec as it comes, waking its readers."""
    try:
        while chunk := await reader.read(1 << 16):
            async with running.changed:
                running.output[fd] += chunk
                running.changed.notify_all()
    finally:
        async with running.changed:
            running.closed.add(fd)
            running.changed.notify_all()
