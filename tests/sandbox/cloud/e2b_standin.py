"""A stand-in for E2B's service, written for evsys's tests: the REST calls the `e2b` SDK makes to build a
template (`POST /v3/templates`, `POST /v2/templates/{id}/builds/{build}`, `GET .../status`), to create and
kill a sandbox (`POST /v2/sandboxes`, `DELETE /sandboxes/{id}`, `X-API-KEY`), and the envd calls it makes
inside one: the Connect RPC `process.Process/Start` (served by the SDK's own generated Connect server classes,
protobuf or JSON as the client chooses) and the file API (`GET`/`POST /files`). As E2B's client proxy does
for a sandbox URL, it routes envd calls by the `E2b-Sandbox-Id` header and checks the sandbox's
`X-Access-Token`; the user is the Basic-auth name (`root`, else the unprivileged user). Each sandbox is one of
evsys's local sandboxes sized like its template (`base`, or a built one's `cpuCount`/`memoryMB`);
`allow_internet_access` picks its network. It builds no images: a template from an image it was not told to
serve from the host's root file system fails its build, with E2B's error status and reason; one from such an
image replays its steps (a Dockerfile's `RUN`, `COPY` from the archives the SDK uploaded through
`GET /templates/{id}/files/{hash}` and the URL it answers, `ENV`, `WORKDIR`, `USER`) in every sandbox started
from it (standin_build.py).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import secrets
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.request import RequestContext
from e2b.envd.process import process_pb
from e2b.envd.process.process_connect import Process, ProcessASGIApplication
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from protobuf import Oneof
from standin_build import replay, template_env, unbuildable

from evsys.records import SandboxSpec
from evsys.sandbox.base import SandboxError
from evsys.sandbox.local.sandbox import LocalSandbox

ENVD_VERSION = "0.6.4"
BASE_TEMPLATE = {"cpus": 2.0, "memory_mb": 512}  # E2B's default template (`base`): its size
_names = itertools.count()


@dataclass
class E2BStandin:
    """The stand-in's state: its API key, its sandboxes (by id), what it was asked to create."""

    api_key: str
    host_images: frozenset[str] = frozenset()
    boxes: dict[str, tuple[str, LocalSandbox]] = field(default_factory=dict)  # id -> (access token, sandbox)
    created: list[dict[str, Any]] = field(default_factory=list)
    templates: dict[str, dict[str, Any]] = field(default_factory=lambda: {"base": {"size": BASE_TEMPLATE}})
    builds: dict[str, dict[str, Any]] = field(default_factory=dict)  # build id -> what was asked, its status
    uploads: dict[str, bytes] = field(default_factory=dict)  # files hash -> the build context's archive

    def api(self) -> FastAPI:
        """The REST API (E2B_API_URL)."""
        app = FastAPI()
        app.post("/v2/sandboxes")(self.create)
        app.delete("/sandboxes/{box_id}")(self.kill)
        app.post("/v3/templates")(self.request_build)
        app.post("/v2/templates/{template_id}/builds/{build_id}")(self.start_build)
        app.get("/templates/{template_id}/builds/{build_id}/status")(self.build_status)
        app.get("/templates/{template_id}/files/{files_hash}")(self.upload_link)
        app.put("/uploads/{files_hash}")(self.receive_upload)
        return app

    def envd(self) -> Any:
        """The envd API (E2B_SANDBOX_URL): the Connect process service and the file calls."""
        files = FastAPI()
        files.get("/files")(self.read)
        files.post("/files")(self.write)
        files.get("/health")(lambda: Response(status_code=204))
        process = ProcessASGIApplication(ProcessService(self))

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            target = process if scope.get("path", "").startswith("/process.Process/") else files
            await target(scope, receive, send)

        return app

    def _authorized(self, request: Request) -> bool:
        return request.headers.get("x-api-key") == self.api_key

    async def request_build(self, request: Request) -> JSONResponse:
        """POST /v3/templates: a template (by name) and a build of it, waiting for its steps."""
        if not self._authorized(request):
            return JSONResponse({"code": 401, "message": "Invalid API key"}, status_code=401)
        body = await request.json()
        template_id, build_id = f"tpl{uuid.uuid4().hex[:12]}", str(uuid.uuid4())
        size = {"cpus": float(body.get("cpuCount", 2)), "memory_mb": int(body.get("memoryMB", 512))}
        self.builds[build_id] = {"name": body["name"], "size": size, "status": "waiting", "asked": body}
        answer = {"templateID": template_id, "buildID": build_id, "public": False, "tags": []}
        return JSONResponse({**answer, "names": [body["name"]], "aliases": [body["name"]]}, status_code=202)

    async def upload_link(self, template_id: str, files_hash: str, request: Request) -> JSONResponse:
        """GET /templates/{id}/files/{hash}: 201, whether a COPY step's files are here, else the URL to PUT
        them to."""
        if not self._authorized(request):
            return JSONResponse({"code": 401, "message": "Invalid API key"}, status_code=401)
        if files_hash in self.uploads:
            return JSONResponse({"present": True}, status_code=201)
        url = f"{request.base_url}uploads/{files_hash}"
        return JSONResponse({"present": False, "url": url}, status_code=201)

    async def receive_upload(self, files_hash: str, request: Request) -> Response:
        """PUT /uploads/{hash} (the upload URL handed out above): the files' tar archive (gzipped or not)."""
        self.uploads[files_hash] = await request.body()
        return Response(status_code=200)

    async def start_build(self, template_id: str, build_id: str, request: Request) -> Response:
        """POST /v2/templates/{id}/builds/{build}: the steps (`fromImage` and the steps after it); only host
        images with steps the stand-in can replay build."""
        build = self.builds[build_id]
        build["steps"] = body = await request.json()
        if body.get("fromImage") not in self.host_images:
            reason: str | None = f"the stand-in cannot build from {body.get('fromImage')!r}"
        else:
            reason = unbuildable(body.get("steps") or [], self.uploads)
        if reason is None:
            build["status"] = "ready"
            self.templates[build["name"]] = build
        else:
            build["status"], build["reason"] = "error", reason
        return Response(status_code=202)

    async def build_status(self, template_id: str, build_id: str) -> JSONResponse:
        """GET /templates/{id}/builds/{build}/status: ready, or error with its reason."""
        build = self.builds[build_id]
        answer = {"templateID": template_id, "buildID": build_id, "status": build["status"]}
        if "reason" in build:
            answer["reason"] = {"message": build["reason"]}
        return JSONResponse({**answer, "logs": [], "logEntries": []})

    async def create(self, request: Request) -> JSONResponse:
        """POST /v2/sandboxes: a sandbox from a known template; 201 with its id and envd access token."""
        if not self._authorized(request):
            return JSONResponse({"code": 401, "message": "Invalid API key"}, status_code=401)
        body = await request.json()
        self.created.append(body)
        known = self.templates.get(body.get("templateID", ""))
        if known is None:
            return JSONResponse(
                {"code": 404, "message": f"template '{body.get('templateID')}' not found"}, 404
            )
        box_id = f"standin{uuid.uuid4().hex[:12]}"
        steps = known.get("steps", {}).get("steps") or []
        spec = SandboxSpec(
            name=f"e2b-standin-{next(_names)}-{box_id[-8:]}",
            workdir="/",
            user="agent",
            env=template_env(steps) | (body.get("envVars") or {}),
            network="public" if body.get("allow_internet_access", True) else "no-network",
            max_output_bytes=256 << 20,
            **known["size"],
        )
        local = LocalSandbox(spec)
        try:
            await local.start()
            await replay(local, steps, self.uploads)
        except SandboxError as exc:
            await local.stop()
            return JSONResponse({"code": 500, "message": str(exc)}, status_code=500)
        token = secrets.token_hex(16)
        self.boxes[box_id] = (token, local)
        answer = {"templateID": body["templateID"], "sandboxID": box_id, "clientID": "standin"}
        return JSONResponse({**answer, "envdVersion": ENVD_VERSION, "envdAccessToken": token}, 201)

    async def kill(self, box_id: str, request: Request) -> Response:
        """DELETE /sandboxes/{id}: stop and forget the sandbox."""
        if not self._authorized(request):
            return JSONResponse({"code": 401, "message": "Invalid API key"}, status_code=401)
        entry = self.boxes.pop(box_id, None)
        if entry is None:
            return JSONResponse({"code": 404, "message": "sandbox not found"}, status_code=404)
        await entry[1].stop()
        return Response(status_code=204)

    def sandbox_for(self, headers: Any) -> LocalSandbox | None:
        """The sandbox an envd call is for (its id and access token in the headers), or None."""
        entry = self.boxes.get(headers.get("e2b-sandbox-id", ""))
        if entry is None or headers.get("x-access-token") != entry[0]:
            return None
        return entry[1]

    async def read(self, request: Request, path: str, username: str = "") -> Response:
        """GET /files: the file's bytes."""
        local = self.sandbox_for(request.headers)
        if local is None:
            return JSONResponse({"code": 401, "message": "unknown sandbox or token"}, status_code=401)
        try:
            data = await local.read_file(path, max_bytes=1 << 40)
        except SandboxError as exc:
            return JSONResponse({"code": 404, "message": str(exc)}, status_code=404)
        return Response(data, media_type="application/octet-stream")

    async def write(self, request: Request, path: str = "", username: str = "") -> JSONResponse:
        """POST /files: one octet-stream body, or multipart `file` parts named by their filenames."""
        local = self.sandbox_for(request.headers)
        if local is None:
            return JSONResponse({"code": 401, "message": "unknown sandbox or token"}, status_code=401)
        uploads: list[tuple[str, bytes]] = []
        if request.headers.get("content-type", "").startswith("application/octet-stream"):
            uploads.append((path, await request.body()))
        else:
            for _, part in (await request.form()).multi_items():
                if not isinstance(part, str):
                    uploads.append((path or str(part.filename), await part.read()))
        written = []
        for target, data in uploads:
            try:
                await local.write_file(target, data, user=_user(username))
            except SandboxError as exc:
                return JSONResponse({"code": 403, "message": str(exc)}, status_code=403)
            written.append({"name": target.rsplit("/", 1)[-1], "type": "file", "path": target})
        return JSONResponse(written)

    async def stop_all(self) -> None:
        """Stop every sandbox still running (the stand-in shutting down)."""
        for _, local in self.boxes.values():
            await local.stop()


def _user(name: str) -> str:
    return "root" if name == "root" else "agent"


class ProcessService(Process):
    """envd's `process.Process` service: `Start` runs the process to its end, then streams its events (the
    other calls answer UNIMPLEMENTED, the generated base class's default)."""

    def __init__(self, standin: E2BStandin) -> None:
        self.standin = standin

    async def start(
        self, request: process_pb.StartRequest, ctx: RequestContext[Any, Any]
    ) -> AsyncIterator[process_pb.StartResponse]:
        """Start a process; its start, output and end events (the combined stream envd sends)."""
        headers = ctx.request_headers
        local = self.standin.sandbox_for(headers)
        if local is None:
            raise ConnectError(Code.UNAUTHENTICATED, "unknown sandbox or token")
        user = base64.b64decode(headers.get("authorization", "Basic Og==").split()[-1]).decode().split(":")[0]
        config = request.process
        Event = process_pb.ProcessEvent
        yield process_pb.StartResponse(event=Event(event=Oneof("start", Event.StartEvent(pid=1))))
        result = await local.exec_program(
            [config.cmd, *config.args], cwd=config.cwd or None, env=dict(config.envs), user=_user(user)
        )
        for stream, data in (("stdout", result.stdout_bytes), ("stderr", result.stderr_bytes)):
            if data:
                output = Event.DataEvent(output=Oneof(stream, data))
                yield process_pb.StartResponse(event=Event(event=Oneof("data", output)))
        end = Event.EndEvent(
            exit_code=result.exit_code, exited=True, status=f"exit status {result.exit_code}"
        )
        yield process_pb.StartResponse(event=Event(event=Oneof("end", end)))


@contextmanager
def serve_standin(standin: E2BStandin) -> Iterator[tuple[str, str]]:
    """Serve the REST API and envd on 127.0.0.1 (free ports) in a thread; yields their base URLs."""
    servers = [
        uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        for app in (standin.api(), standin.envd())
    ]
    loop = asyncio.new_event_loop()

    async def serve_both() -> None:
        await asyncio.gather(*(server.serve() for server in servers))

    thread = threading.Thread(target=loop.run_until_complete, args=(serve_both(),), daemon=True)
    thread.start()
    while not all(server.started for server in servers):
        if not thread.is_alive():
            raise RuntimeError("the E2B stand-in did not start")
        threading.Event().wait(0.05)
    api, envd = (f"http://127.0.0.1:{s.servers[0].sockets[0].getsockname()[1]}" for s in servers)
    try:
        yield api, envd
    finally:
        asyncio.run_coroutine_threadsafe(standin.stop_all(), loop).result(timeout=120)
        for server in servers:
            server.should_exit = True
        thread.join(timeout=30)
