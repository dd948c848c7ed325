"""Error mapping and retries, against a real misbehaving HTTP server on 127.0.0.1 (no mocked transport)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from evsys.model import (
    AuthenticationError,
    ContextOverflowError,
    QuotaExceededError,
    RetryableModelError,
    RetryPolicy,
    SamplingParams,
    UnknownModelError,
    create_model_client,
)

FAST = RetryPolicy(max_attempts=4, base_delay_s=0.01, max_delay_s=2.0, jitter=0.0)
OK_BODY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "flaky",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "fine"},
            "finish_reason": "stop",
            "token_ids": [7, 8],
            "logprobs": {
                "content": [{"token": "fi", "logprob": -0.5, "bytes": []}, {"token": "ne", "logprob": -0.25}]
            },
        }
    ],
    "prompt_token_ids": [1, 2, 3],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}


def _error(status: int, message: str, code: str | None = None, headers: dict | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": "error", "param": None, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def flaky_app() -> FastAPI:
    """Behaviour chosen by the requested model name: fail N times with a status, then succeed."""
    app = FastAPI()
    app.state.calls = {}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        model = body["model"]
        count = app.state.calls[model] = app.state.calls.get(model, 0) + 1
        if model.startswith("500-then-ok") and count == 1:
            return _error(500, "internal error")
        if model == "429-then-ok" and count <= 2:
            return _error(429, "slow down", "rate_limit_exceeded", {"Retry-After": "1"})
        if model == "always-503":
            return _error(503, "overloaded")
        if model == "needs-key":
            return _error(401, "invalid api key", "invalid_api_key")
        if model == "no-money":
            return _error(429, "You exceeded your current quota", "insufficient_quota")
        if model == "too-long":
            return _error(400, "This model's maximum context length is 8 tokens", "context_length_exceeded")
        if model == "missing":
            return _error(404, "The model `missing` does not exist", "model_not_found")
        if model == "bad-args":
            body = {**OK_BODY, "choices": [dict(OK_BODY["choices"][0])]}
            body["choices"][0]["message"] = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{oops"}}
                ],
            }
            body["choices"][0]["finish_reason"] = "tool_calls"
            return JSONResponse(body)
        return JSONResponse(OK_BODY)

    return app


@pytest.fixture(scope="module")
def flaky(serve_app) -> Iterator[tuple[str, FastAPI]]:
    """A running flaky server: (base URL, app) — app.state.calls counts requests per model name."""
    app = flaky_app()
    with serve_app(app) as url:
        yield url + "/v1", app


def _client(model: str, url: str, delays: list[float]):
    return create_model_client(
        f"vllm:{model}", base_url=url, retry=FAST, on_retry=lambda attempt, error, delay: delays.append(delay)
    )


async def test_500_then_200_is_retried(flaky):
    """One 500 then success: the caller gets the completion (with token ids) after one retry."""
    url, app = flaky
    delays: list[float] = []
    done = await _client("500-then-ok", url, delays).complete([{"role": "user", "content": "hi"}])
    assert done.text == "fine" and done.completion_token_ids == [7, 8] and done.prompt_token_ids == [1, 2, 3]
    assert done.logprobs == [-0.5, -0.25]
    assert app.state.calls["500-then-ok"] == 2 and len(delays) == 1


async def test_429_waits_at_least_retry_after(flaky):
    """429 with Retry-After: 1 is retried twice, each wait honouring the header over the short backoff."""
    url, app = flaky
    delays: list[float] = []
    done = await _client("429-then-ok", url, delays).complete([{"role": "user", "content": "hi"}])
    assert done.text == "fine"
    assert app.state.calls["429-then-ok"] == 3
    assert delays == [1.0, 1.0]


async def test_persistent_5xx_gives_up_after_max_attempts(flaky):
    """A server that always answers 503 is tried max_attempts times, then a RetryableModelError surfaces."""
    url, app = flaky
    delays: list[float] = []
    with pytest.raises(RetryableModelError, match="503"):
        await _client("always-503", url, delays).complete([{"role": "user", "content": "hi"}])
    assert app.state.calls["always-503"] == FAST.max_attempts
    assert delays == [0.01, 0.02, 0.04]


@pytest.mark.parametrize(
    ("model", "error", "text"),
    [
        ("needs-key", AuthenticationError, "invalid api key"),
        ("no-money", QuotaExceededError, "quota"),
        ("too-long", ContextOverflowError, "maximum context length"),
        ("missing", UnknownModelError, "does not exist"),
    ],
)
async def test_final_errors_are_not_retried(flaky, model, error, text):
    """401, quota 429, context overflow and 404 raise their own error after exactly one request."""
    url, app = flaky
    delays: list[float] = []
    with pytest.raises(error, match=text):
        await _client(model, url, delays).complete([{"role": "user", "content": "hi"}])
    assert app.state.calls[model] == 1 and delays == []


async def test_invalid_tool_call_json_is_a_parse_error_not_an_exception(flaky):
    """A tool call whose arguments are not JSON comes back with parse_error set."""
    url, _ = flaky
    done = await _client("bad-args", url, []).complete([{"role": "user", "content": "hi"}])
    assert done.finish_reason == "tool_calls"
    call = done.tool_calls[0]
    assert call.function_name == "bash" and call.raw_arguments == "{oops" and call.arguments == {}
    assert "invalid JSON" in call.parse_error


async def test_connection_refused_is_retryable():
    """Nothing listening: a RetryableModelError naming the URL, after max_attempts tries."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    delays: list[float] = []
    client = _client("x", f"http://127.0.0.1:{port}/v1", delays)
    with pytest.raises(RetryableModelError, match=f"127.0.0.1:{port}"):
        await client.complete([{"role": "user", "content": "hi"}], params=SamplingParams(timeout_s=5))
    assert len(delays) == FAST.max_attempts - 1


async def test_litellm_backend_against_a_real_server(flaky):
    """The litellm backend (offline cost map) completes, retries a 500 and maps 401 to AuthenticationError."""
    pytest.importorskip("litellm")
    url, app = flaky
    delays: list[float] = []

    def client(model: str):
        return create_model_client(
            f"litellm:openai/{model}",
            base_url=url,
            api_key="test",
            retry=FAST,
            on_retry=lambda *a: delays.append(a[2]),
        )

    done = await client("500-then-ok-litellm").complete([{"role": "user", "content": "hi"}])
    assert done.text == "fine" and done.usage.completion_tokens == 2
    assert app.state.calls["500-then-ok-litellm"] == 2 and len(delays) == 1
    with pytest.raises(AuthenticationError):
        await client("needs-key").complete([{"role": "user", "content": "hi"}])
