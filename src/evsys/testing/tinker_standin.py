"""A stand-in for Tinker's sampling service, backed by evsys's local engine; the real SDK talks to it by HTTP.

Tinker is a cloud service; tests (and anyone without an account) point the SDK's
`ServiceClient(base_url=...)` at this stand-in instead. It answers the HTTP routes the SDK (`tinker` 0.38)
uses for sampling, with the SDK's own request and response types: the client and dynamic config (API keys,
no JWT exchange, one future per request), sessions and their heartbeats, sampling sessions for a base model
or a saved `tinker://` path, `asample` (a future per request) and `retrieve_future` (long-polled; the result
as the protobuf `SampleResponse` the SDK decodes), cancellation, telemetry and session finish. Sampling runs
on the local torch engine (evsys.model.local) over the model directory each base model maps to:
`num_samples` sequences, each with its sampled token ids and the raw-distribution logprob of each token,
ending at the model's end-of-sequence (kept as the last token), a stop string or token, or `max_tokens`
(stop reason `length`).

It is not Tinker: no training, no prompt logprobs or top-k, no queueing or billing; requests for those are
refused. Every request must carry the stand-in's API key (`X-API-Key`).

    standin = TinkerStandIn({"tiny": model_dir})
    with standin.serve() as url:
        client = tinker.ServiceClient(base_url=url, api_key=STANDIN_API_KEY)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from evsys.model.errors import ContextOverflowError
from evsys.model.local.client import LocalModelClient
from evsys.model.tinker_client import local_sampling_params

STANDIN_API_KEY = "tml-evsys-standin"
LONG_POLL_SEC = 20.0
PROTOBUF = "application/x-protobuf"
Handler = Callable[[Request], Awaitable[Response]]


class StandInError(Exception):
    """A request the stand-in refuses: answered as the failed future or HTTP error (`status`) Tinker gives."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class SampledRecord:
    """One `asample` the stand-in served: what it was asked and what it returned (for tests to inspect)."""

    model: str
    prompt_ids: list[int]
    sequences: list[tuple[list[int], list[float], str]] = field(default_factory=list)


class TinkerStandIn:
    """The HTTP service: `models` maps base-model names to local model directories; `weights` maps saved
    sampler paths (`tinker://...`) to the base model whose weights they are (sampled as that model)."""

    def __init__(
        self,
        models: Mapping[str, Path | str],
        *,
        weights: Mapping[str, str] | None = None,
        api_key: str = STANDIN_API_KEY,
    ) -> None:
        self.models = {name: LocalModelClient(str(path)) for name, path in models.items()}
        self.weights = dict(weights or {})
        unknown = sorted(set(self.weights.values()) - set(self.models))
        if unknown:
            raise ValueError(f"weights name base models the stand-in does not serve: {', '.join(unknown)}")
        self.api_key = api_key
        self.samplers: dict[str, str] = {}  # sampling session -> base model
        self.sampler_paths: dict[str, str | None] = {}  # sampling session -> the weights it samples
        self.futures: dict[str, asyncio.Task[Any]] = {}
        self.sampled: list[SampledRecord] = []
        self.finished_sessions: list[str] = []
        self._ids = itertools.count(1)

    def app(self) -> Starlette:
        """The Starlette application answering the SDK's routes."""
        routes = {
            "/api/v1/client/config": self._client_config,
            "/api/v1/client/dynamic_config": self._dynamic_config,
            "/api/v1/create_session": self._create_session,
            "/api/v1/session_heartbeat": self._heartbeat,
            "/api/v1/create_sampling_session": self._create_sampling_session,
            "/api/v1/asample": self._asample,
            "/api/v1/retrieve_future": self._retrieve_future,
            "/api/v1/cancel_future": self._cancel_future,
            "/api/v1/telemetry": self._telemetry,
            "/api/v1/sessions/{session_id}/finish": self._finish_session,
        }
        posts = [Route(path, self._guarded(handler), methods=["POST"]) for path, handler in routes.items()]
        gets = [
            Route("/api/v1/samplers/{sampler_id}", self._guarded(self._get_sampler), methods=["GET"]),
            Route("/api/v1/healthz", self._guarded(self._health), methods=["GET"]),
            Route("/api/v1/get_server_capabilities", self._guarded(self._capabilities), methods=["GET"]),
        ]
        return Starlette(routes=[*posts, *gets])

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        """Serve on 127.0.0.1 (an ephemeral port) in a thread; yields the base URL for `ServiceClient`."""
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(self.app(), log_level="warning", lifespan="off"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the Tinker stand-in did not start")
            time.sleep(0.01)
        try:
            yield f"http://127.0.0.1:{sock.getsockname()[1]}"
        finally:
            server.should_exit = True
            thread.join(timeout=10)
            sock.close()

    def _guarded(self, handler: Handler) -> Handler:
        async def guarded(request: Request) -> Response:
            if request.headers.get("x-api-key") != self.api_key:
                return JSONResponse({"detail": "invalid API key"}, status_code=401)
            try:
                return await handler(request)
            except StandInError as exc:
                return JSONResponse({"detail": str(exc)}, status_code=exc.status)

        return guarded

    def _new_id(self, kind: str) -> str:
        return f"standin-{kind}-{next(self._ids)}-{secrets.token_hex(4)}"

    async def _client_config(self, request: Request) -> Response:
        from tinker import types

        config = types.ClientConfigResponse(
            pjwt_auth_enabled=False, use_pyqwest_transport=False, sample_use_retrieve_futures=False
        )
        return JSONResponse(config.model_dump(mode="json"))

    async def _dynamic_config(self, request: Request) -> Response:
        from tinker import types

        return JSONResponse(types.ClientDynamicConfigResponse().model_dump(mode="json"))

    async def _create_session(self, request: Request) -> Response:
        return JSONResponse({"type": "create_session", "session_id": self._new_id("session")})

    async def _heartbeat(self, request: Request) -> Response:
        return JSONResponse({"type": "session_heartbeat"})

    async def _create_sampling_session(self, request: Request) -> Response:
        from tinker import types

        body = types.CreateSamplingSessionRequest.model_validate(await request.json())
        if body.model_path is not None and body.model_path not in self.weights:
            raise StandInError(f"no saved weights at {body.model_path!r}", status=404)
        name = self.weights[body.model_path] if body.model_path else body.base_model or ""
        if name not in self.models:
            served = ", ".join(sorted(self.models))
            raise StandInError(f"unknown base model {name!r}; this stand-in serves: {served}", status=404)
        sampler_id = self._new_id("sampler")
        self.samplers[sampler_id] = name
        self.sampler_paths[sampler_id] = body.model_path
        return JSONResponse({"type": "create_sampling_session", "sampling_session_id": sampler_id})

    async def _get_sampler(self, request: Request) -> Response:
        sampler_id = request.path_params["sampler_id"]
        if sampler_id not in self.samplers:
            return JSONResponse({"detail": f"no sampler {sampler_id}"}, status_code=404)
        base_model, path = self.samplers[sampler_id], self.sampler_paths[sampler_id]
        return JSONResponse({"sampler_id": sampler_id, "base_model": base_model, "model_path": path})

    async def _asample(self, request: Request) -> Response:
        from tinker import types

        body = types.SampleRequest.model_validate(await request.json())
        name = self.samplers.get(body.sampling_session_id or "") or body.base_model
        if name is None or name not in self.models:
            raise StandInError(f"unknown sampling session or model {name!r}")
        if body.prompt_logprobs or body.topk_prompt_logprobs or body.topk_sample_logprobs:
            raise StandInError("the Tinker stand-in samples only: no prompt or top-k logprobs")
        request_id = self._new_id("future")
        self.futures[request_id] = asyncio.ensure_future(self._sample(name, body))
        sequence_ids = [f"{request_id}-{i}" for i in range(body.num_samples)]
        return JSONResponse({"request_id": request_id, "sample_sequence_ids": sequence_ids})

    async def _sample(self, name: str, body: Any) -> bytes:
        """`num_samples` generations on the local engine, as the protobuf `SampleResponse`."""
        from tinker.proto import tinker_public_pb2 as pb

        client = self.models[name]
        engine = await client.engine()
        prompt_ids = body.prompt.to_ints()
        base = local_sampling_params(body.sampling_params, engine.decode)
        record = SampledRecord(model=name, prompt_ids=prompt_ids)
        response = pb.SampleResponse()
        for i in range(body.num_samples):
            seed = None if base.seed is None else base.seed + i
            result = await client.shared.generate(prompt_ids, base.model_copy(update={"seed": seed}))
            reason = pb.STOP_REASON_STOP if result.finish_reason == "stop" else pb.STOP_REASON_LENGTH
            response.sequences.add(
                stop_reason=reason,
                tokens=np.asarray(result.completion_ids, dtype=np.int32).tobytes(),
                logprobs=np.asarray(result.logprobs, dtype=np.float32).tobytes(),
            )
            record.sequences.append((result.completion_ids, result.logprobs, result.finish_reason))
        self.sampled.append(record)
        return response.SerializeToString()

    async def _retrieve_future(self, request: Request) -> Response:
        request_id = (await request.json())["request_id"]
        task = self.futures.get(request_id)
        if task is None:
            return JSONResponse({"detail": f"no future {request_id}"}, status_code=404)
        done, _ = await asyncio.wait({task}, timeout=LONG_POLL_SEC)
        if not done:
            return JSONResponse({"type": "try_again", "request_id": request_id, "queue_state": "active"})
        self.futures.pop(request_id, None)
        error = task.exception() if not task.cancelled() else asyncio.CancelledError("cancelled")
        if error is not None:
            category = "user" if isinstance(error, ContextOverflowError | StandInError) else "server"
            return JSONResponse({"error": str(error) or type(error).__name__, "category": category})
        return Response(task.result(), media_type=PROTOBUF)

    async def _cancel_future(self, request: Request) -> Response:
        task = self.futures.pop((await request.json())["request_id"], None)
        if task is not None:
            task.cancel()
        return JSONResponse(None)

    async def _telemetry(self, request: Request) -> Response:
        return JSONResponse({"status": "accepted"})

    async def _finish_session(self, request: Request) -> Response:
        self.finished_sessions.append(request.path_params["session_id"])
        return JSONResponse(None)

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def _capabilities(self, request: Request) -> Response:
        models = [{"model_name": name, "sampleable": True, "trainable": False} for name in self.models]
        return JSONResponse({"supported_models": models})
