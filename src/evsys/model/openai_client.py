"""The `openai` backend: the official async SDK against the OpenAI API or any OpenAI-compatible server.

Token ids and logprobs are collected from whatever the server returns:
- vLLM and `evsys model serve`: request `return_token_ids` → `prompt_token_ids` on the response,
  `token_ids` on each choice; logprobs from `choices[].logprobs.content[].logprob`;
- SGLang: the same `return_token_ids` request (ids also accepted as `output_ids` / `input_ids`);
- llama.cpp's llama-server: each `logprobs.content[]` entry carries the token `id`.
The official OpenAI API returns no token ids; those fields stay None. SDK errors are mapped to evsys's
errors and retryable ones are retried with backoff (the SDK's own retries are turned off).
"""

from __future__ import annotations

import os
import time
from typing import Any

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
from evsys.model.openai_wire import parse_tool_call
from evsys.model.pricing import price_usd
from evsys.model.retry import RetryHook, RetryPolicy, call_with_retries, parse_retry_after
from evsys.model.spec import ModelSpec
from evsys.records import Usage

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
        from openai import AsyncOpenAI

        self.spec = spec
        self.model = spec.model
        self.retry = retry or RetryPolicy()
        self.on_retry = on_retry
        self.return_token_ids = return_token_ids
        api_key = spec.api_key or os.environ.get("OPENAI_API_KEY") or (None if api_key_required else "EMPTY")
        if api_key is None:
            raise AuthenticationError("openai: no API key; set OPENAI_API_KEY or pass api_key")
        self._client = AsyncOpenAI(
            api_key=api_key, base_url=spec.resolved_base_url(), max_retries=0, timeout=timeout_s
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
        request = self._request(messages, tools, params)
        started = time.perf_counter()
        response = await call_with_retries(lambda: self._create(request), self.retry, self.on_retry)
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
        if extra:
            request["extra_body"] = extra
        if params.timeout_s is not None:
            request["timeout"] = params.timeout_s
        return request

    async def _create(self, request: dict) -> Any:
        import openai

        try:
            return await self._client.chat.completions.create(**request)
        except openai.APIStatusError as exc:
            raise map_status_error(exc.status_code, _error_message(exc), exc.response.headers) from exc
        except openai.APITimeoutError as exc:
            raise RetryableModelError(f"{self.spec}: request timed out") from exc
        except openai.APIConnectionError as exc:
            raise RetryableModelError(
                f"{self.spec}: cannot connect to {self._client.base_url}: {exc}"
            ) from exc

    def _to_completion(self, response: Any, latency: float) -> Completion:
        if not response.choices:
            raise ModelError(f"{self.spec}: the server returned no choices")
        choice = response.choices[0]
        message = choice.message
        calls = [
            parse_tool_call(c.function.name, c.function.arguments or "", c.id)
            for c in (message.tool_calls or [])
            if getattr(c, "function", None) is not None
        ]
        entries = list(getattr(choice.logprobs, "content", None) or [])
        logprobs = [e.logprob for e in entries] or None
        completion_ids = _extra(choice, "token_ids", "output_ids") or _ids_from_entries(entries)
        prompt_ids = _extra(response, "prompt_token_ids", "input_ids") or _extra(choice, "prompt_token_ids")
        usage = response.usage
        cached = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", 0) or 0
        finish: FinishReason = choice.finish_reason if choice.finish_reason in FINISH_REASONS else "stop"
        if calls and finish == "stop":
            finish = "tool_calls"
        spent = Usage(
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
            cached_tokens=cached,
        )
        return Completion(
            text=message.content or "",
            tool_calls=calls,
            finish_reason=finish,
            prompt_token_ids=prompt_ids,
            completion_token_ids=completion_ids,
            logprobs=logprobs,
            usage=spent,
            cost_usd=price_usd(
                self.model, spent, provider=self.spec.provider, base_url=str(self._client.base_url)
            ),
            model=response.model or self.model,
            latency_s=latency,
        )

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.close()


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


def _error_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            parts = [str(error.get("message") or "")]
            if error.get("code"):
                parts.append(f"[{error['code']}]")
            return " ".join(p for p in parts if p)
    return str(getattr(exc, "message", exc))


def _extra(obj: Any, *names: str) -> list[int] | None:
    extra = getattr(obj, "model_extra", None) or {}
    for name in names:
        value = extra.get(name)
        if isinstance(value, list) and all(isinstance(v, int) for v in value):
            return value
    meta = extra.get("meta_info")
    if isinstance(meta, dict):
        for name in names:
            value = meta.get(name)
            if isinstance(value, list) and all(isinstance(v, int) for v in value):
                return value
    return None


def _ids_from_entries(entries: list[Any]) -> list[int] | None:
    ids = [(getattr(e, "model_extra", None) or {}).get("id") for e in entries]
    ints = [i for i in ids if isinstance(i, int)]
    return ints if ids and len(ints) == len(ids) else None
