"""The proxy's model endpoints on the wire, per dialect: the request model a JSON body is validated with
(`parse_request`) and the reply a finished completion is answered with (`completion_reply`: one JSON body, or
server-sent events when the request streams). `server.py` routes requests here after checking their key."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from evsys.model.base import Completion
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


async def parse_request(
    request: Any, dialect: Dialect, *, unwrap: str | None = None
) -> tuple[Any, str | None]:
    """Validate the JSON body (the object under `unwrap`, when the body has it) with `dialect`'s request
    model; on failure return a message naming the offending fields."""
    model = WIRES[dialect].request
    try:
        body = loads_bounded(await request.body())
    except ValueError as exc:
        return None, f"request body is not valid JSON: {exc}"
    if unwrap is not None and isinstance(body, dict) and isinstance(body.get(unwrap), dict):
        body = body[unwrap]
    try:
        return model.model_validate(body), None
    except ValidationError as exc:
        detail = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
        return None, f"invalid request: {detail}"


def request_notes(dialect: Dialect, request: Any) -> list[str]:
    """What of `request` the model never saw (tools or input items the dialect could not carry over)."""
    return WIRES[dialect].notes(request)


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
