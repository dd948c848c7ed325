"""The `litellm` backend: hosted providers through LiteLLM (optional extra: `pip install evsys[litellm]`).

LiteLLM is imported lazily, with `LITELLM_LOCAL_MODEL_COST_MAP=True` so its price table loads from the
installed package instead of the network. Hosted APIs return no token ids; cost comes from LiteLLM's price
table."""

from __future__ import annotations

import os
import time
from typing import Any

from evsys.model.base import FINISH_REASONS, Completion, FinishReason, Message, SamplingParams, ToolSchema
from evsys.model.errors import ModelError, RetryableModelError
from evsys.model.openai_client import map_status_error
from evsys.model.retry import RetryHook, RetryPolicy, call_with_retries
from evsys.model.spec import ModelSpec
from evsys.model.tool_calls import parse_tool_call
from evsys.records import Usage


def import_litellm() -> Any:
    """Import LiteLLM with its cost map loaded offline, or fail naming the extra to install."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    except ImportError as exc:
        raise ModelError("the litellm backend needs LiteLLM: pip install 'evsys[litellm]'") from exc
    return litellm


class LiteLLMClient:
    """ModelClient over `litellm.acompletion` (model strings like `litellm:anthropic/claude-sonnet-4-5`)."""

    def __init__(
        self, spec: ModelSpec, *, retry: RetryPolicy | None = None, on_retry: RetryHook | None = None
    ) -> None:
        self.litellm = import_litellm()
        self.spec = spec
        self.model = spec.model
        self.retry = retry or RetryPolicy()
        self.on_retry = on_retry

    async def complete(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSchema] | None = None,
        params: SamplingParams | None = None,
    ) -> Completion:
        """One completion through LiteLLM, retried on transient errors."""
        params = params or SamplingParams()
        request: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": params.temperature,
        }
        request.update({"top_p": params.top_p, "num_retries": 0, **params.extra_body})
        for key in ("max_tokens", "seed", "timeout_s"):
            value = getattr(params, key)
            if value is not None:
                request["timeout" if key == "timeout_s" else key] = value
        if params.stop:
            request["stop"] = params.stop
        if tools:
            request["tools"] = tools
        if self.spec.base_url:
            request["api_base"] = self.spec.base_url
        if self.spec.api_key:
            request["api_key"] = self.spec.api_key
        started = time.perf_counter()
        response = await call_with_retries(lambda: self._create(request), self.retry, self.on_retry)
        return self._to_completion(response, time.perf_counter() - started)

    async def _create(self, request: dict) -> Any:
        try:
            return await self.litellm.acompletion(**request)
        except Exception as exc:
            status = getattr(exc, "status_code", None)
            if isinstance(status, int):
                headers = getattr(getattr(exc, "response", None), "headers", None)
                raise map_status_error(status, str(exc), headers) from exc
            if "timeout" in type(exc).__name__.lower() or "connection" in type(exc).__name__.lower():
                raise RetryableModelError(f"{self.spec}: {exc}") from exc
            raise ModelError(f"{self.spec}: {exc}") from exc

    def _to_completion(self, response: Any, latency: float) -> Completion:
        choice = response.choices[0]
        message = choice.message
        calls = [
            parse_tool_call(c.function.name, c.function.arguments or "", c.id)
            for c in (getattr(message, "tool_calls", None) or [])
        ]
        try:
            cost = float(self.litellm.completion_cost(completion_response=response))
        except Exception:  # models missing from the price table have no cost
            cost = None
        usage = getattr(response, "usage", None)
        finish: FinishReason = choice.finish_reason if choice.finish_reason in FINISH_REASONS else "stop"
        return Completion(
            text=message.content or "",
            tool_calls=calls,
            finish_reason="tool_calls" if calls and finish == "stop" else finish,
            usage=Usage(
                prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
            ),
            cost_usd=cost,
            model=getattr(response, "model", None) or self.model,
            latency_s=latency,
        )

    async def aclose(self) -> None:
        """Nothing to release."""
