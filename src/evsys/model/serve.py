"""An OpenAI-compatible HTTP server over the local engine (`evsys model serve`).

Endpoints: `GET /v1/models`, `POST /v1/chat/completions` (tools, logprobs, `stream`, vLLM-style
`return_token_ids`: `prompt_token_ids` on the response, `token_ids` on each choice), `POST /v1/completions` (a
prompt given as text or token ids). Errors use OpenAI's JSON error shape: 400 for a bad request or a context
overflow (`context_length_exceeded`), 404 for an unknown model (`model_not_found`), 500 otherwise. The bodies
are the models of `evsys.model.openai_wire` (shared with the proxy); prompts are rendered and completions
parsed by the engine's `Renderer` (`evsys.model.render`). `tool_choice` "required" or naming a tool, and a
JSON `response_format`, are enforced by constrained decoding (`evsys.model.local.constrain`).

A client that disconnects cancels its generation: a streamed response stops with the stream, a plain one is
raced against the connection's `http.disconnect` (the engine drops the request at its next decode step).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import Request  # this module is imported only by the serve command, which needs fastapi

from evsys.model.base import Completion, SamplingParams
from evsys.model.errors import ContextOverflowError, ModelError, UnknownModelError
from evsys.model.openai_wire import (
    SSE_DONE,
    ChatCompletion,
    ChoiceLogprobs,
    ChunkChoice,
    ChunkStream,
    Delta,
    TextChoice,
    TextCompletion,
    TextCompletionRequest,
    TextLogprobs,
    WireToolCall,
    WireUsage,
    error_body,
)
from evsys.model.serve_requests import (
    ServeChatRequest,
    ServeTextRequest,
    validation_error_param,
    validation_error_text,
)
from evsys.records import Usage

if TYPE_CHECKING:
    from fastapi import FastAPI

    from evsys.model.local.client import LocalModelClient
    from evsys.model.local.engine import LocalEngine

log = logging.getLogger("evsys.model.serve")
T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client went away before its answer was ready; its generation was cancelled."""


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it (and so its generation) if the client disconnects first."""
    job = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait({job, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not job.done():
            job.cancel()
            job.add_done_callback(_retrieve)  # a cancelled gather ends with an exception nobody awaits
    if job.cancelled() or not job.done():
        log.warning("client disconnected; generation cancelled (%s %s)", request.method, request.url.path)
        raise ClientDisconnected()
    return job.result()


def _retrieve(done: asyncio.Future) -> None:
    """Mark a finished future's exception as seen (asyncio logs unseen ones with a traceback)."""
    if not done.cancelled():
        done.exception()


async def _disconnect(request: Request) -> None:
    """Return once the client has disconnected (the request body is already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def create_app(client: LocalModelClient, served_name: str | None = None) -> FastAPI:
    """Build the FastAPI app serving `client`'s model under `served_name` (default: the client's name)."""
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse

    name = served_name or client.model
    app = FastAPI(title="evsys model server")

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        detail = "; ".join(validation_error_text(e) for e in errors)
        body = error_body(
            f"invalid request: {detail}", "invalid_request_error", param=validation_error_param(errors)
        )
        return JSONResponse(body, status_code=400)

    @app.exception_handler(ModelError)
    async def _model_error(_: Request, exc: ModelError) -> JSONResponse:
        if isinstance(exc, ContextOverflowError):
            body = error_body(str(exc), "invalid_request_error", "context_length_exceeded", "messages")
            return JSONResponse(body, status_code=400)
        if isinstance(exc, UnknownModelError):
            return JSONResponse(
                error_body(str(exc), "invalid_request_error", "model_not_found"), status_code=404
            )
        return JSONResponse(error_body(str(exc), "server_error"), status_code=exc.status_code or 500)

    @app.exception_handler(ClientDisconnected)
    async def _gone(_: Request, exc: ClientDisconnected) -> JSONResponse:
        return JSONResponse(error_body("client disconnected", "client_closed_request"), status_code=499)

    @app.exception_handler(ValueError)
    async def _value_error(_: Request, exc: ValueError) -> JSONResponse:
        return JSONResponse(error_body(str(exc), "invalid_request_error"), status_code=400)

    def check_model(requested: str) -> None:
        if not requested:
            raise ValueError(f"invalid request: model: a model is required (this server serves {name!r})")
        if requested != name:
            raise UnknownModelError(f"model {requested!r} is not served here; this server serves {name!r}")

    @app.get("/v1/models")
    async def list_models() -> dict:
        return {
            "object": "list",
            "data": [{"id": name, "object": "model", "created": 0, "owned_by": "evsys"}],
        }

    @app.post("/v1/chat/completions")
    async def chat(body: ServeChatRequest, request: Request) -> Any:
        check_model(body.model)
        engine = await client.engine()
        messages, tools = body.chat()
        if body.stream:
            prompt_ids = await client.shared.run(lambda e: e.renderer.render(messages, tools))
            engine.budget(len(prompt_ids), body.sampling().max_tokens)  # fail with 400 before streaming
            events = _stream_chat(client, engine, name, body, prompt_ids)
            return StreamingResponse(events, media_type="text/event-stream")
        choices = await unless_disconnected(
            request,
            asyncio.gather(
                *(
                    client.complete(messages, tools=tools, params=p, constraint=body.constraint())
                    for p in choice_params(body.sampling(), body.n)
                )
            ),
        )
        responses = [ChatCompletion.of(body, c, name, engine.decode) for c in choices]
        return _merged(responses, choices).model_dump()

    @app.post("/v1/completions")
    async def completions(body: ServeTextRequest, request: Request) -> Any:
        check_model(body.model)
        engine = await client.engine()
        prompt_ids = body.prompt_ids(engine.encode)
        if not prompt_ids:
            raise ValueError("prompt is empty")
        choices = await unless_disconnected(
            request,
            asyncio.gather(
                *(client.complete_ids(prompt_ids, p) for p in choice_params(body.sampling(), body.n))
            ),
        )
        return _merged([_text_response(engine, name, body, c) for c in choices], choices).model_dump()

    return app


def choice_params(params: SamplingParams, n: int) -> list[SamplingParams]:
    """The sampling parameters of each of `n` choices: the request's, seeded `seed + i` when it has a seed
    (distinct, reproducible choices), else each from fresh entropy."""
    if params.seed is None:
        return [params] * n
    return [params.model_copy(update={"seed": params.seed + i}) for i in range(n)]


Response = TypeVar("Response", ChatCompletion, TextCompletion)


def _merged(responses: list[Response], completions: list[Completion]) -> Response:
    """One response holding every choice (indexed in order); usage counts the prompt once."""
    merged = responses[0]
    merged.choices = [r.choices[0].model_copy(update={"index": i}) for i, r in enumerate(responses)]
    prompt = completions[0].usage.prompt_tokens
    generated = sum(c.usage.completion_tokens for c in completions)
    merged.usage = WireUsage.of(Usage(prompt_tokens=prompt, completion_tokens=generated))
    return merged


def _text_response(
    engine: LocalEngine, name: str, body: TextCompletionRequest, completion: Completion
) -> TextCompletion:
    ids = completion.completion_token_ids or []
    logprobs = None
    if body.logprobs is not None:
        logprobs = TextLogprobs(tokens=[engine.decode([t]) for t in ids], token_logprobs=completion.logprobs)
    choice = TextChoice(text=completion.text, finish_reason=completion.finish_reason, logprobs=logprobs)
    prompt_ids = None
    if body.return_token_ids:
        choice.token_ids, choice.prompt_token_ids = ids, completion.prompt_token_ids
        prompt_ids = completion.prompt_token_ids
    usage = WireUsage.of(completion.usage)
    return TextCompletion(model=name, choices=[choice], usage=usage, prompt_token_ids=prompt_ids)


def _held_back(text: str, markers: list[str]) -> int:
    """How many trailing characters of `text` could be the start of a marker (or an unfinished character)."""
    if text.endswith("\ufffd"):
        return 1 + _held_back(text[:-1], markers)
    keep = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), 0, -1):
            if text.endswith(marker[:size]):
                keep = max(keep, size)
                break
    return keep


async def _stream_chat(
    client: LocalModelClient,
    engine: LocalEngine,
    name: str,
    body: ServeChatRequest,
    prompt_ids: list[int],
) -> AsyncIterator[str]:
    """SSE chunks: content deltas as tokens arrive, then tool calls + finish reason, usage, [DONE]; an error
    event instead when the engine stops mid-stream (the server shutting down)."""
    try:
        async for event in _chat_events(client, engine, name, body, prompt_ids):
            yield event
    except ModelError as exc:
        yield f"data: {json.dumps(error_body(str(exc), 'server_error'))}\n\n"


async def _chat_events(
    client: LocalModelClient,
    engine: LocalEngine,
    name: str,
    body: ServeChatRequest,
    prompt_ids: list[int],
) -> AsyncIterator[str]:
    from evsys.model.local.client import build_completion
    from evsys.model.local.constrain import reads_tool_calls
    from evsys.model.local.engine import GenerationResult

    params = body.sampling()
    stream = ChunkStream(name)
    first = ChunkChoice(delta=Delta(role="assistant", content=""))
    yield stream.event(first, prompt_token_ids=prompt_ids if body.return_token_ids else None)
    constraint = body.constraint()
    calls = reads_tool_calls(constraint)
    markers = [*(engine.renderer.tool_call_markers if calls else ()), *params.stop]
    ids: list[int] = []
    sent = 0
    started = time.perf_counter()
    async for item in client.stream(prompt_ids, params, constraint):
        if isinstance(item, GenerationResult):
            elapsed = time.perf_counter() - started
            completion = build_completion(
                client.model,
                engine.renderer,
                prompt_ids,
                item,
                params,
                elapsed,
                tool_calls=calls,
            )
            break
        token_id, logprob = item
        ids.append(token_id)
        text = engine.decode([t for t in ids if t not in engine.eos_ids])
        cut = min([i for i in (text.find(m) for m in markers if m) if i >= 0], default=None)
        safe = cut if cut is not None else len(text) - _held_back(text, markers)
        choice = ChunkChoice(delta=Delta(content=text[sent:safe]))
        sent = max(sent, safe)
        if body.logprobs:
            choice.logprobs = ChoiceLogprobs.of([token_id], [logprob], engine.decode)
        if body.return_token_ids:
            choice.token_ids = [token_id]
        yield stream.event(choice)
    else:
        raise ModelError("the engine's token stream ended without its result")
    delta = Delta(content=completion.text[sent:] if len(completion.text) > sent else None)
    if completion.tool_calls:
        delta.tool_calls = [WireToolCall.of(call, index) for index, call in enumerate(completion.tool_calls)]
    yield stream.event(ChunkChoice(delta=delta, finish_reason=completion.finish_reason))
    if body.include_usage():
        yield stream.event(None, usage=WireUsage.of(completion.usage))
    yield SSE_DONE
