"""The proxy's model endpoints on the wire, per dialect: the request model a JSON body is validated with
(`decode_request`) and the reply a finished completion is answered with (`completion_reply`: one JSON body, or
server-sent events when the request streams). `server.py` routes requests here after checking their key."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from evsys.model.base import Completion, Message, SamplingParams, ToolSchema
from evsys.model.openai_wire import cap_tokens
from evsys.model.proxy import anthropic_dialect, google_dialect, openai_dialect, responses_dialect
from evsys.model.proxy.session import Dialect
from evsys.util.jsonparse import loads_bounded

SSE = "text/event-stream"
# A reply renderer: the parsed request, the completion and the proxy's max_tokens cap (None: no cap).
Render = Callable[[Any, Completion, int | None], Any]


class CallDefaults(BaseModel):
    """The job's generation flags for a harness's model calls: `temperature` and `max_tokens` for the requests
    that do not pass their own (`--temperature`, `--max-tokens`), and `max_calls` (`--max-turns`), how many
    calls one trial's harness may make (the next is refused)."""

    temperature: float | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=1)
    max_calls: int | None = Field(None, ge=1)


@dataclass(frozen=True)
class DialectWire:
    """One dialect's request model, its two reply renderers, what of a request the model never saw, and
    which of `temperature` and `max_tokens` a request passed itself."""

    request: type[BaseModel]
    body: Render  # the JSON body of a whole reply
    events: Render  # the SSE events of a streamed reply (an iterator of strings)
    given: Callable[[Any], tuple[Any, Any]]  # the request's own (temperature, max tokens); None: not passed
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


def _google_given(request: google_dialect.GoogleRequest) -> tuple[Any, Any]:
    config = request.generationConfig or google_dialect.GenerationConfig()
    return config.temperature, config.maxOutputTokens


WIRES: dict[Dialect, DialectWire] = {
    "openai": DialectWire(
        openai_dialect.OpenAIChatRequest,
        _uncapped(openai_dialect.chat_response),
        _uncapped(openai_dialect.stream_chunks),
        lambda r: (r.temperature, r.max_completion_tokens or r.max_tokens),
    ),
    "anthropic": DialectWire(
        anthropic_dialect.AnthropicRequest,
        _uncapped(anthropic_dialect.message_response),
        _uncapped(anthropic_dialect.stream_events),
        lambda r: (r.temperature, r.max_tokens),
    ),
    "responses": DialectWire(
        responses_dialect.ResponsesRequest,
        _responses_body,
        _responses_events,
        lambda r: (r.temperature, r.max_output_tokens),
        _request_notes,
    ),
    "google": DialectWire(
        google_dialect.GoogleRequest,
        _uncapped(google_dialect.generate_response),
        _uncapped(google_dialect.stream_events),
        _google_given,
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
    raw: bytes,
    dialect: Dialect,
    *,
    max_tokens_cap: int | None,
    defaults: CallDefaults | None = None,
    **from_path: Any,
) -> tuple[PreparedCall | None, str | None]:
    """`decode_request`, with the fields its path names (`from_path`: the Google model and streaming) set,
    turned into the chat in OpenAI shape: (the call, None) or (None, what is wrong with the request). The
    `defaults`' temperature and max tokens fill what the request did not pass. Blocking, like
    `decode_request`."""
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
    if defaults is not None:
        params = _with_defaults(params, WIRES[dialect].given(request), defaults, max_tokens_cap)
    return PreparedCall(request, messages, tools, params, WIRES[dialect].notes(request)), None


def _with_defaults(
    params: SamplingParams, given: tuple[Any, Any], defaults: CallDefaults, cap: int | None
) -> SamplingParams:
    """`params` with the defaults' temperature and max tokens where the request passed none (under `cap`)."""
    temperature, max_tokens = given
    update: dict[str, Any] = {}
    if temperature is None and defaults.temperature is not None:
        update["temperature"] = defaults.temperature
    if max_tokens is None and defaults.max_tokens is not None:
        update["max_tokens"] = cap_tokens(defaults.max_tokens, cap)
    return params.model_copy(update=update) if update else params


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
