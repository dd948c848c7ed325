"""The `openai` backend: chat completions over HTTP against the OpenAI API or any OpenAI-compatible server.

Token ids and logprobs are collected from whatever the server returns:
- vLLM and `evsys model serve`: request `return_token_ids` → `prompt_token_ids` on the response,
  `token_ids` on each choice; logprobs from `choices[].logprobs.content[].logprob`;
- SGLang: the same `return_token_ids` request (ids also accepted as `output_ids` / `input_ids`);
- llama.cpp's llama-server: each `logprobs.content[]` entry carries the token `id`.
The official OpenAI API returns no token ids; those fields stay None. HTTP errors are mapped to evsys's
errors and retryable ones are retried with backoff.

The wire is aiohttp with JSON dicts, not the OpenAI SDK: the SDK's request transform (a walk of every
message and tool schema against its TypedDicts) and response models cost ~10 ms of CPU per call, and httpx's
connection pool scans every connection on each request — both grow with concurrency and made the
orchestrator, not the model, the limit at RL concurrency (docs/scale.md). aiohttp's pool is uncapped and keeps
connections alive, so a job with a thousand calls in flight reuses its connections. The proxy the
environment names for the base URL (HTTP_PROXY / HTTPS_PROXY / NO_PROXY) is read once, when the client is
made, not on every call (aiohttp's `trust_env` re-reads the environment and ~/.netrc in a thread per request).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from evsys.model.base import FINISH_REASONS, Completion, FinishReason, Message, SamplingParams, ToolSchema
from evsys.model.errors import (
    AuthenticationError,
    ContextOverflowError,
    InvalidRequestError,
    ModelError,
    QuotaExceededError,
    RetryableModelError,
    UnknownModelError,
)
from evsys.model.loop_sessions import LoopSessions
from evsys.model.pricing import price_usd
from evsys.model.retry import RetryHook, RetryPolicy, call_with_retries, parse_retry_after
from evsys.model.spec import ModelSpec
from evsys.model.tool_calls import parse_tool_call
from evsys.records import Usage

DEFAULT_BASE_URL = "https://api.openai.com/v1"
OVERFLOW_HINTS = ("context_length_exceeded", "maximum context length", "context length", "too many tokens")


class OpenAIClient:
    """ModelClient over an OpenAI-compatible chat-completions endpoint."""

    def __init__(
        self,
        spec: ModelSpec,
        *,
        retry: RetryPolicy | None = None,
        on_retry: RetryHook | None = None,
        timeout_s: float = 600.0,
        return_token_ids: bool = False,
        api_key_required: bool = False,
    ) -> None:
        """`return_token_ids` asks the server for token ids (vLLM, SGLang, `evsys model serve`);
        `api_key_required` refuses to start without a key (the OpenAI API) instead of sending 'EMPTY'."""
        self.spec = spec
        self.model = spec.model
        self.retry = retry or RetryPolicy()
        self.on_retry = on_retry
        self.return_token_ids = return_token_ids
        api_key = spec.api_key or os.environ.get("OPENAI_API_KEY") or (None if api_key_required else "EMPTY")
        if api_key is None:
            raise AuthenticationError("openai: no API key; set OPENAI_API_KEY or pass api_key")
        base_url = spec.resolved_base_url() or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        self._url = f"{self.base_url}/chat/completions"
        self._proxy, self._proxy_auth = env_proxy(self._url)
        self._timeout = timeout_s
        # one HTTP session per event loop (aiohttp binds it to its loop), closed with aclose() or the loop
        self._sessions = LoopSessions(self._new_session)

    def _new_session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            headers=self._headers,
            connector=aiohttp.TCPConnector(limit=0),  # no cap: the job's concurrency bounds the calls
            timeout=aiohttp.ClientTimeout(total=self._timeout),
        )

    async def complete(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSchema] | None = None,
        params: SamplingParams | None = None,
    ) -> Completion:
        """One chat completion, retried on transient errors."""
        params = params or SamplingParams()
        body = json.dumps(self._request(messages, tools, params)).encode()
        timeout_s = params.timeout_s
        started = time.perf_counter()
        response = await call_with_retries(lambda: self._create(body, timeout_s), self.retry, self.on_retry)
        return self._to_completion(response, time.perf_counter() - started)

    def _request(
        self, messages: list[Message], tools: list[ToolSchema] | None, params: SamplingParams
    ) -> dict:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": params.temperature,
        }
        if params.top_p != 1.0:
            request["top_p"] = params.top_p
        if params.max_tokens is not None:
            request["max_tokens"] = params.max_tokens
        if params.stop:
            request["stop"] = params.stop
        if params.seed is not None:
            request["seed"] = params.seed
        if tools:
            request["tools"] = tools
        if params.logprobs:
            request["logprobs"] = True
        extra = dict(params.extra_body)
        if self.return_token_ids:
            extra.setdefault("return_token_ids", True)
        if params.top_k is not None:
            extra.setdefault("top_k", params.top_k)
        request.update(extra)  # vendor fields go in the body itself, as the SDK's `extra_body` sends them
        return request

    async def _create(self, body: bytes, timeout_s: float | None) -> dict[str, Any]:
        """POST the request body; the response's JSON, or the matching evsys error."""
        limit = aiohttp.ClientTimeout(total=timeout_s) if timeout_s is not None else None
        session, proxy, proxy_auth = await self._sessions.get(), self._proxy, self._proxy_auth
        try:
            async with session.post(
                self._url, data=body, timeout=limit, proxy=proxy, proxy_auth=proxy_auth
            ) as response:
                text = await response.text()
                status, headers = response.status, response.headers
        except TimeoutError as exc:
            raise RetryableModelError(f"{self.spec}: request timed out") from exc
        except aiohttp.ClientError as exc:
            raise RetryableModelError(f"{self.spec}: cannot connect to {self.base_url}: {exc}") from exc
        if status >= 400:
            raise map_status_error(status, _error_message(text), headers)
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ModelError(f"{self.spec}: the server's answer is not JSON: {text[:200]!r}") from exc
        if not isinstance(data, dict):
            raise ModelError(f"{self.spec}: the server's answer is not a JSON object")
        return data

    def _to_completion(self, response: dict[str, Any], latency: float) -> Completion:
        choices = response.get("choices")
        if not choices or not isinstance(choices[0], dict):
            raise ModelError(f"{self.spec}: the server returned no choices")
        choice = choices[0]
        message = choice.get("message") or {}
        calls = [
            parse_tool_call(
                str(function.get("name") or ""), function.get("arguments") or "", str(c.get("id") or "")
            )
            for c in (message.get("tool_calls") or [])
            if isinstance(c, dict) and isinstance(function := c.get("function"), dict)
        ]
        entries = [e for e in ((choice.get("logprobs") or {}).get("content") or []) if isinstance(e, dict)]
        logprobs = [e["logprob"] for e in entries if "logprob" in e] or None
        completion_ids = _ids(choice, "token_ids", "output_ids") or _ids_from_entries(entries)
        prompt_ids = _ids(response, "prompt_token_ids", "input_ids") or _ids(choice, "prompt_token_ids")
        usage = response.get("usage") or {}
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        reason = choice.get("finish_reason")
        finish: FinishReason = reason if reason in FINISH_REASONS else "stop"
        if calls and finish == "stop":
            finish = "tool_calls"
        spent = Usage(
            prompt_tokens=usage.get("prompt_tokens") or 0,
            completion_tokens=usage.get("completion_tokens") or 0,
            cached_tokens=cached,
        )
        return Completion(
            text=message.get("content") or "",
            tool_calls=calls,
            finish_reason=finish,
            prompt_token_ids=prompt_ids,
            completion_token_ids=completion_ids,
            logprobs=logprobs,
            usage=spent,
            cost_usd=price_usd(self.model, spent, provider=self.spec.provider, base_url=self.base_url),
            model=response.get("model") or self.model,
            latency_s=latency,
        )

    async def aclose(self) -> None:
        """Close this event loop's HTTP connection pool (another loop's closes when that loop ends)."""
        await self._sessions.aclose()


def env_proxy(url: str) -> tuple[URL | None, aiohttp.BasicAuth | None]:
    """The proxy (and its credentials) the environment names for `url` — HTTP_PROXY / HTTPS_PROXY, unless
    NO_PROXY exempts its host — as other HTTP clients honour them; (None, None) for a direct connection."""
    try:
        return get_env_proxy_for_url(URL(url))
    except LookupError:
        return None, None


def map_status_error(status: int, message: str, headers: Any = None) -> ModelError:
    """Turn an HTTP error status and message into the matching evsys model error."""
    lowered = message.lower()
    retry_after = parse_retry_after((headers or {}).get("retry-after"))
    if status in (401, 403):
        return AuthenticationError(f"authentication failed ({status}): {message}", status_code=status)
    if status == 404:
        return UnknownModelError(f"unknown model or endpoint ({status}): {message}", status_code=status)
    if status == 429 and "insufficient_quota" in lowered:
        return QuotaExceededError(f"quota exhausted (429): {message}", status_code=status)
    if status in (408, 409, 429) or status >= 500:
        return RetryableModelError(
            f"server error {status}: {message}", status_code=status, retry_after_s=retry_after
        )
    if status in (400, 413, 422) and any(hint in lowered for hint in OVERFLOW_HINTS):
        return ContextOverflowError(f"context overflow ({status}): {message}", status_code=status)
    return InvalidRequestError(f"request rejected ({status}): {message}", status_code=status)


def _error_message(text: str) -> str:
    """The message (and code) of an OpenAI-shaped error body, else the body's text."""
    try:
        body = json.loads(text)
    except ValueError:
        return text[:500]
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            parts = [str(error.get("message") or "")]
            if error.get("code"):
                parts.append(f"[{error['code']}]")
            return " ".join(p for p in parts if p)
    return str(body)


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return value
    return None


def _ids(obj: dict[str, Any], *names: str) -> list[int] | None:
    """Token ids under the first of `names` present on `obj` (or on its SGLang `meta_info`)."""
    meta = obj.get("meta_info")
    for where in (obj, meta if isinstance(meta, dict) else {}):
        for name in names:
            if (ids := _int_list(where.get(name))) is not None:
                return ids
    return None


def _ids_from_entries(entries: list[dict[str, Any]]) -> list[int] | None:
    ids = [e.get("id") for e in entries]
    ints = [i for i in ids if isinstance(i, int)]
    return ints if ids and len(ints) == len(ids) else None
