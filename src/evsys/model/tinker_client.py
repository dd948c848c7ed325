"""The `tinker` backend: sampling through the Tinker SDK's `SamplingClient` (optional extra: `evsys[tinker]`).

`-m tinker:<base model>` (`tinker:Qwen/Qwen3-8B`) samples a base model; `-m tinker:tinker://<run>/...` samples
weights a Tinker training run saved for its sampler. The client is token-native: evsys's renderer
(evsys.model.render, over the model's own tokenizer and chat template) turns the chat and tools into prompt
ids, the SDK samples from exactly those ids, and the returned sequence's token ids and per-token logprobs are
recorded as they came back — the text and tool calls are read out of the ids by the same renderer, as the
local engine does. Usage counts the prompt, the completion and the prompt tokens Tinker billed as cache hits.

The SDK is imported when the first request is made; its client set-up (session, sampling session) runs in a
worker thread, so nothing blocks the event loop. The key is `TINKER_API_KEY` (or the model spec's api_key);
the service is the SDK's default, `TINKER_BASE_URL`, or `--base-url`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evsys.model.base import Completion, Message, SamplingParams, ToolSchema
from evsys.model.errors import (
    AuthenticationError,
    InvalidRequestError,
    ModelError,
    RetryableModelError,
    UnknownModelError,
)
from evsys.model.render import ChatTemplateRenderer, Renderer
from evsys.model.spec import ModelSpec
from evsys.records import Usage

SAMPLER_PATH_PREFIX = "tinker://"
DEFAULT_MAX_TOKENS = 1024


def import_tinker() -> Any:
    """The Tinker SDK, or a ModelError naming the extra to install."""
    try:
        import tinker
    except ImportError as exc:
        raise ModelError("the tinker backend needs the Tinker SDK: pip install 'evsys[tinker]'") from exc
    return tinker


def tinker_sampling_params(tinker: Any, params: SamplingParams, max_tokens: int) -> Any:
    """evsys sampling parameters as the SDK's `SamplingParams` (stop strings as given; none: the EOS)."""
    return tinker.SamplingParams(
        max_tokens=params.max_tokens or max_tokens,
        seed=params.seed,
        stop=list(params.stop) or None,
        temperature=params.temperature,
        top_k=params.top_k or -1,
        top_p=params.top_p,
    )


def local_sampling_params(params: Any, decode: Callable[[list[int]], str]) -> SamplingParams:
    """The SDK's `SamplingParams` as evsys's, for sampling them on the local engine: stop token ids become
    their decoded text (special tokens decode to their own markers), `stop=[]` samples past end-of-sequence
    as Tinker does, and `stop=None` stops at the model's end-of-sequence."""
    stop = params.stop
    if isinstance(stop, str):
        stop = [stop]
    texts = [item if isinstance(item, str) else decode([item]) for item in stop or []]
    return SamplingParams(
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k if params.top_k > 0 else None,
        max_tokens=params.max_tokens,
        stop=texts,
        seed=params.seed,
        ignore_eos=stop is not None and not texts,
    )


def model_error(tinker: Any, exc: Exception) -> ModelError:
    """An SDK failure (after the SDK's own retries) as the evsys model error a trial records."""
    kinds: list[tuple[type[Exception], type[ModelError]]] = [
        (tinker.AuthenticationError, AuthenticationError),
        (tinker.PermissionDeniedError, AuthenticationError),
        (tinker.NotFoundError, UnknownModelError),
        (tinker.BadRequestError, InvalidRequestError),
        (tinker.RequestFailedError, InvalidRequestError),
        (tinker.APIConnectionError, RetryableModelError),
    ]
    kind = next((ours for theirs, ours in kinds if isinstance(exc, theirs)), ModelError)
    return kind(f"tinker: {exc}", status_code=getattr(exc, "status_code", None))


class TinkerModelClient:
    """ModelClient over a Tinker `SamplingClient` (model strings `tinker:<base model>`, `tinker:tinker://...`).

    Options: `tokenizer` (a local directory or Hugging Face name; default: the model directory when the base
    model names one, else the SDK's `get_tokenizer()`), `max_tokens` (the budget when a request sets none)."""

    def __init__(
        self, spec: ModelSpec, *, tokenizer: str | None = None, max_tokens: int = DEFAULT_MAX_TOKENS
    ) -> None:
        self.tinker = import_tinker()
        self.spec = spec
        self.model = str(spec)
        self.tokenizer_name = tokenizer
        self.max_tokens = max_tokens
        self._service: Any = None
        self._sampler: Any = None
        self._renderer: Renderer | None = None
        self._lock = asyncio.Lock()

    async def sampler(self) -> tuple[Any, Renderer]:
        """The SDK's sampling client and the renderer for its model (created on first use, in a thread)."""
        async with self._lock:
            if self._sampler is None:
                self._sampler, self._renderer = await asyncio.to_thread(self._connect)
        assert self._renderer is not None
        return self._sampler, self._renderer

    def _connect(self) -> tuple[Any, Renderer]:
        self._service = self.tinker.ServiceClient(
            base_url=self.spec.resolved_base_url(), api_key=self.spec.api_key
        )
        name = self.spec.model
        if name.startswith(SAMPLER_PATH_PREFIX):
            future = self._service.create_sampling_client(model_path=name)
        else:
            future = self._service.create_sampling_client(base_model=name)
        sampler = future.result()
        return sampler, ChatTemplateRenderer(self._tokenizer(sampler))

    def _tokenizer(self, sampler: Any) -> Any:
        source = self.tokenizer_name or sampler.get_base_model()
        if self.tokenizer_name is None and not Path(source).is_dir():
            return sampler.get_tokenizer()  # the SDK's own mapping from model names to tokenizers
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(source)

    async def complete(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSchema] | None = None,
        params: SamplingParams | None = None,
    ) -> Completion:
        """Render the chat, sample one sequence through Tinker, and read text and tool calls from its ids."""
        params = params or SamplingParams()
        started = time.perf_counter()
        try:
            sampler, renderer = await self.sampler()
            prompt_ids = await asyncio.to_thread(renderer.render, messages, tools)
            response = await sampler.sample(
                prompt=self.tinker.ModelInput.from_ints(prompt_ids),
                num_samples=1,
                sampling_params=tinker_sampling_params(self.tinker, params, self.max_tokens),
            )
        except self.tinker.TinkerError as exc:
            raise model_error(self.tinker, exc) from exc
        sequence = response.sequences[0]
        ids = list(sequence.tokens)
        parsed = await asyncio.to_thread(renderer.parse, ids, params.stop)
        finish = sequence.stop_reason
        if parsed.tool_calls and finish == "stop":
            finish = "tool_calls"
        usage = Usage(
            prompt_tokens=len(prompt_ids),
            completion_tokens=len(ids),
            cached_tokens=response.prompt_cache_hit_tokens,
        )
        return Completion(
            text=parsed.text,
            raw_text=parsed.raw_text,
            tool_calls=parsed.tool_calls,
            finish_reason=finish,
            prompt_token_ids=prompt_ids,
            completion_token_ids=ids,
            logprobs=list(sequence.logprobs) if params.logprobs and sequence.logprobs is not None else None,
            usage=usage,
            model=self.model,
            latency_s=time.perf_counter() - started,
        )

    async def aclose(self) -> None:
        """End the Tinker session (its heartbeats and connections)."""
        service, self._service, self._sampler = self._service, None, None
        if service is not None:
            await asyncio.to_thread(lambda: service.close("success").result())
