"""The proxy's model endpoints on the wire, per dialect: the request model a JSON body is validated with
(`decode_request`) and the reply a finished completion is answered with (`completion_reply`: one JSON body, or
server-sent events when the request streams). `server.py` routes requests here after checking their key."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from evsys.model.base import Completion, Message, SamplingParams, ToolSchema
from evsys.model.proxy import anthropic_dialect, google_dialect, openai_dialect, responses_dialect
from evsys.model.proxy.session import Dialect
from evsys.util.jsonparse import loads_bounded

SSE = "text/event-stream"
# A reply renderer: the parsed request, the completion and the proxy's max_tokens cap (None: no cap).
Render = Callable[[Any, Completion, int | None], Any]


@dataclass(frozen=True)
class DialectWire:
    """One dialect's request model, its two reply renderers, and what of a request the model never saw."""

    request: type[BaseModel]
    body: Render  # the JSON body of a whole reply
    events: Render  # the SSE events of a streamed reply (an iterator of strings)
    notes: Callable[[Any], list[str]] = lambda request: []  # recorded on the call (dropped tools, ...)


def _request_notes(request: Any) -> list[str]:
    return list(request.notes)


def _uncapped(render: Callable[[Any, Completion], Any]) -> Render:
    """`render` for a dialect whose reply does not depend on the proxy's max_tokens cap."""
    return lambda request, completion, cap: render(request, completion)


def _responses_body(request: Any, completion: Completion, cap: int | None) -> dict[str, Any]:
    return responses_dialect.response_object(request, completion, max_tokens_cap=cap)


def _responses_events(request: Any, completion: Completion, cap: int | None) -> Iterator[str]:
    return responses_dialect.stream_events(request, completion, max_tokens_cap=cap)


WIRES: dict[Dialect, DialectWire] = {
    "openai": DialectWire(
        openai_dialect.OpenAIChatRequest,
        _uncapped(openai_dialect.chat_response),
        _uncapped(openai_dialect.stream_chunks),
    ),
    "anthropic": DialectWire(
        anthropic_dialect.AnthropicRequest,
        _uncapped(anthropic_dialect.message_response),
        _uncapped(anthropic_dialect.stream_events),
    ),
    "responses": DialectWire(
        responses_dialect.ResponsesRequest, _responses_body, _responses_events, _request_notes
    ),
    "google": DialectWire(
        google_dialect.GoogleRequest,
        _uncapped(google_dialect.generate_response),
        _uncapped(google_dialect.stream_events),
        _request_notes,
    ),
}


def decode_request(raw: bytes, dialect: Dialect, *, unwrap: str | None = None) -> tuple[Any, str | None]:
    """Parse the JSON body `raw` and validate it (the object under `unwrap`,
    when the body has it) with `dialect`'s request model; on failure return a message naming the offending
    fields. Blocking: the proxy runs it in a worker thread."""
    model = WIRES[dialect].request
    try:
        body = loads_bounded(raw)
    except ValueError as exc:
        return None, f"request body is not valid JSON: {exc}"
    if unwrap is not None and isinstance(body, dict) and isinstance(body.get(unwrap), dict):
        body = body[unwrap]
    try:
        return model.model_validate(body), None
    except ValidationError as exc:
        detail = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
        return None, f"invalid request: {detail}"


@dataclass(frozen=True)
class PreparedCall:
    """A validated request and the chat it becomes: what `ModelProxy` records and gives its model client."""

    request: Any
    messages: list[Message]
    tools: list[ToolSchema] | None
    params: SamplingParams
    notes: list[str]  # what of the request the model never saw (tools or items the dialect cannot carry)


def prepare_call(
    raw: bytes, dialect: Dialect, *, max_tokens_cap: int | None, **from_path: Any
) -> tuple[PreparedCall | None, str | None]:
    """`decode_request`, with the fields its path names (`from_path`: the Google model and streaming) set,
    turned into the chat in OpenAI shape: (the call, None) or (None, what is wrong with the request).
    Blocking, like `decode_request`."""
    request, problem = decode_request(raw, dialect)
    if request is None:
        return None, problem
    for name, value in from_path.items():
        setattr(request, name, value)
    try:
        messages, tools = request.chat()
        params = request.sampling(max_tokens_cap)
    except (ValueError, ValidationError) as exc:
        return None, f"invalid request: {exc}"
    return PreparedCall(request, messages, tools, params, WIRES[dialect].notes(request)), None


def completion_reply(
    dialect: Dialect, request: Any, completion: Completion, max_tokens_cap: int | None
) -> Any:
    """The HTTP response answering `request` with `completion` in `dialect`: its events when the request
    streams, else its JSON body."""
    from starlette.responses import JSONResponse, StreamingResponse

    wire = WIRES[dialect]
    if request.stream:
        return StreamingResponse(wire.events(request, completion, max_tokens_cap), media_type=SSE)
    return JSONResponse(wire.body(request, completion, max_tokens_cap))
