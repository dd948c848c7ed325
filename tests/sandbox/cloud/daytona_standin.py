"""A stand-in for Daytona's service, written for evsys's tests: the REST API calls the `daytona` SDK makes to
create, read and delete a sandbox, and the toolbox API calls it makes to run a command (`/process/execute`)
and move files (`/files/bulk-upload`, `/files/bulk-download`), with the same paths, JSON and multipart bodies
(read from the SDK's generated clients). Each sandbox it creates is one of evsys's local sandboxes: its
`networkBlockAll`, `cpu` and `memory` (GiB) become the local sandbox's network and limits, its `env` the
environment of every command, its `user` the user commands run as. It builds no images: a `FROM` reference
it was not told to serve from the host's root file system fails the build, as Daytona reports a failed one;
the rest of the Dockerfile it receives (`buildInfo.dockerfileContent`) is replayed in the sandbox
(standin_build.py), and a line it cannot replay fails the build the same way.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from standin_build import dockerfile_steps, replay, template_env

from evsys.records import SandboxSpec
from evsys.sandbox.base import SandboxError
from evsys.sandbox.local.sandbox import LocalSandbox

DEFAULTS = {"cpu": 1, "memory": 1, "disk": 3}  # Daytona's defaults for a sandbox (cores, GiB, GiB)
_names = itertools.count()


@dataclass
class StandinBox:
    """One sandbox of the stand-in: its Daytona record and the local sandbox behind it."""

    record: dict[str, Any]
    local: LocalSandbox | None


@dataclass
class DaytonaStandin:
    """The stand-in service's state: its API key, the images it serves, its sandboxes, what it was asked."""

    api_key: str
    host_images: frozenset[str] = frozenset()
    boxes: dict[str, StandinBox] = field(default_factory=dict)
    created: list[dict[str, Any]] = field(default_factory=list)
    base_url: str = ""

    def app(self) -> FastAPI:
        """The FastAPI app serving the REST API at `/` and the toolbox API at `/toolbox/<id>/`."""
        app = FastAPI()

        @app.middleware("http")
        async def authenticate(request: Request, call_next: Any) -> Response:
            if request.headers.get("authorization") != f"Bearer {self.api_key}":
                return JSONResponse({"message": "Unauthorized", "statusCode": 401}, status_code=401)
            return await call_next(request)

        app.post("/sandbox")(self.create)
        app.get("/sandbox/{box_id}")(self.get)
        app.delete("/sandbox/{box_id}")(self.delete)
        app.post("/toolbox/{box_id}/process/execute")(self.execute)
        app.post("/toolbox/{box_id}/files/bulk-upload")(self.upload)
        app.post("/toolbox/{box_id}/files/bulk-download")(self.download)
        return app

    async def create(self, request: Request) -> JSONResponse:
        """POST /sandbox: build (only the host images) and start a sandbox; its record, state `started`."""
        body = await request.json()
        self.created.append(body)
        box_id = str(uuid.uuid4())
        dockerfile = (body.get("buildInfo") or {}).get("dockerfileContent")
        record = {
            "id": box_id,
            "organizationId": "standin-org",
            "name": body.get("name") or box_id,
            "user": body.get("user") or "daytona",
            "env": body.get("env") or {},
            "labels": body.get("labels") or {},
            "public": bool(body.get("public")),
            "networkBlockAll": bool(body.get("networkBlockAll")),
            "kvm": False,
            "target": body.get("target") or "us",
            "cpu": body.get("cpu") or DEFAULTS["cpu"],
            "gpu": 0,
            "memory": body.get("memory") or DEFAULTS["memory"],
            "disk": body.get("disk") or DEFAULTS["disk"],
            "state": "started",
            "toolboxProxyUrl": f"{self.base_url}/toolbox",
        }
        steps, reason = dockerfile_steps(dockerfile, self.host_images) if dockerfile else ([], None)
        if reason is not None:
            record.update(state="build_failed", errorReason=reason)
            self.boxes[box_id] = StandinBox(record, None)
            return JSONResponse(record)
        local: LocalSandbox | None = LocalSandbox(_local_spec(record, template_env(steps)))
        assert local is not None
        try:
            await local.start()
        except SandboxError as exc:
            record.update(state="error", errorReason=str(exc))
            local = None
        try:
            if local is not None:
                await replay(local, steps, {})
        except SandboxError as exc:  # a build step failed
            record.update(state="build_failed", errorReason=str(exc))
            await local.stop()
            local = None
        self.boxes[box_id] = StandinBox(record, local)
        return JSONResponse(record)

    def _box(self, box_id: str) -> StandinBox:
        box = self.boxes.get(box_id)
        if box is None:
            raise HTTPException(404, detail=f"Sandbox with ID {box_id} not found")
        return box

    def _running(self, box_id: str) -> LocalSandbox:
        box = self._box(box_id)
        if box.local is None or box.record["state"] != "started":
            raise HTTPException(400, detail=f"Sandbox {box_id} is not started")
        return box.local

    async def get(self, box_id: str) -> JSONResponse:
        """GET /sandbox/{id}: the sandbox's record."""
        return JSONResponse(self._box(box_id).record)

    async def delete(self, box_id: str) -> JSONResponse:
        """DELETE /sandbox/{id}: stop the local sandbox; the record stays, state `destroyed`."""
        box = self._box(box_id)
        if box.local is not None:
            await box.local.stop()
        box.record["state"] = "destroyed"
        return JSONResponse(box.record)

    async def execute(self, box_id: str, request: Request) -> JSONResponse:
        """POST /toolbox/{id}/process/execute: run `command` as the sandbox's user; exit code and the
        combined output as text (what Daytona's daemon returns)."""
        local = self._running(box_id)
        body = await request.json()
        result = await local.exec(
            body["command"],
            cwd=body.get("cwd") or "/",
            env=body.get("envs") or {},
            timeout=body.get("timeout") or 10,  # the daemon's default
        )
        text = (result.stdout_bytes + result.stderr_bytes).decode(errors="replace")
        return JSONResponse({"exitCode": -1 if result.timed_out else result.exit_code, "result": text})

    async def upload(self, box_id: str, request: Request) -> JSONResponse:
        """POST /toolbox/{id}/files/bulk-upload: multipart `files[i].path` and `files[i].file`, written as
        the sandbox's user (parents created)."""
        local = self._running(box_id)
        form = await request.form()
        for key, value in form.multi_items():
            if key.endswith(".file") and not isinstance(value, str):
                path = form.get(key.removesuffix(".file") + ".path") or value.filename
                data = await value.read()
                try:
                    await local.write_file(str(path), data, user=local.spec.user)
                except SandboxError as exc:
                    return JSONResponse({"errors": [str(exc)]}, status_code=400)
        return JSONResponse({})

    async def download(self, box_id: str, request: Request) -> Response:
        """POST /toolbox/{id}/files/bulk-download: JSON `paths`; a multipart/form-data answer, one `file` part
        (or `error` part) per path, its source path as the part's filename."""
        local = self._running(box_id)
        boundary = uuid.uuid4().hex
        parts: list[bytes] = []
        for path in (await request.json())["paths"]:
            try:
                name, data = "file", await local.read_file(path, max_bytes=1 << 40)
            except SandboxError as exc:
                name, data = "error", str(exc).encode()
            head = f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{path}"\r\n'
            kind = "application/octet-stream" if name == "file" else "text/plain"
            parts.append(f"{head}Content-Type: {kind}\r\n\r\n".encode() + data + b"\r\n")
        body = b"".join(parts) + f"--{boundary}--\r\n".encode()
        return Response(body, media_type=f"multipart/form-data; boundary={boundary}")

    async def stop_all(self) -> None:
        """Stop every local sandbox still running (the stand-in shutting down)."""
        for box in self.boxes.values():
            if box.local is not None:
                await box.local.stop()


def _local_spec(record: dict[str, Any], image_env: dict[str, str]) -> SandboxSpec:
    return SandboxSpec(
        name=f"daytona-standin-{next(_names)}-{record['id'][:8]}",
        workdir="/",
        user="root" if record["user"] == "root" else "agent",
        env=image_env | record["env"],
        network="no-network" if record["networkBlockAll"] else "public",
        cpus=float(record["cpu"]),
        memory_mb=int(record["memory"]) * 1024,
        max_output_bytes=256 << 20,
    )


@contextmanager
def serve_standin(standin: DaytonaStandin) -> Iterator[str]:
    """Serve `standin` on 127.0.0.1 (a free port) in a thread of its own; yields its base URL."""
    server = uvicorn.Server(uvicorn.Config(standin.app(), host="127.0.0.1", port=0, log_level="warning"))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.serve(),), daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the Daytona stand-in did not start")
        threading.Event().wait(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    standin.base_url = f"http://127.0.0.1:{port}"
    try:
        yield standin.base_url
    finally:
        asyncio.run_coroutine_threadsafe(standin.stop_all(), loop).result(timeout=120)
        server.should_exit = True
        thread.join(timeout=30)
