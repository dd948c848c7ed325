"""The model-string grammar and the factory that turns a model string into a `ModelClient`.

Grammar: `provider[:model]`.

| string                            | backend                                                          |
|-----------------------------------|------------------------------------------------------------------|
| `local`                           | in-process engine, default model (SmolLM2-135M-Instruct, offline) |
| `local:/path/to/hf-dir`           | in-process engine over any local Hugging Face model directory      |
| `openai:gpt-4.1`                  | the OpenAI API (OPENAI_API_KEY)                                   |
| `vllm:Qwen/Qwen3-8B`              | a vLLM server (--base-url, default http://localhost:8000/v1)       |
| `sglang:Qwen/Qwen3-8B`            | an SGLang server (default http://localhost:30000/v1)              |
| `llamacpp:model`                  | llama.cpp's llama-server (default http://localhost:8080/v1)       |
| `litellm:anthropic/claude-...`    | any provider LiteLLM knows (pip install evsys[litellm])            |
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evsys.model.base import ModelClient
from evsys.model.errors import UnknownModelError

Provider = Literal["local", "openai", "vllm", "sglang", "llamacpp", "litellm"]
PROVIDERS: tuple[str, ...] = ("local", "openai", "vllm", "sglang", "llamacpp", "litellm")

DEFAULT_BASE_URLS: dict[str, str] = {
    "vllm": "http://localhost:8000/v1",
    "sglang": "http://localhost:30000/v1",
    "llamacpp": "http://localhost:8080/v1",
}


class ModelSpec(BaseModel):
    """A parsed model string plus connection settings."""

    model_config = ConfigDict(extra="forbid")

    provider: Provider
    model: str = Field("", description="Model name or path; empty means the provider's default (local only).")
    base_url: str | None = None
    api_key: str | None = Field(None, repr=False)

    def __str__(self) -> str:
        return f"{self.provider}:{self.model}" if self.model else self.provider

    @classmethod
    def parse(cls, text: str, *, base_url: str | None = None, api_key: str | None = None) -> ModelSpec:
        """Parse `provider[:model]`; an unknown provider raises ValueError listing the valid ones."""
        text = text.strip()
        if not text:
            raise ValueError(f"empty model string; expected provider[:model] with provider one of {_valid()}")
        provider, _, model = text.partition(":")
        if provider not in PROVIDERS:
            raise ValueError(f"unknown model provider {provider!r} in {text!r}; valid providers: {_valid()}")
        if not model and provider != "local":
            raise ValueError(f"model string {text!r} names no model; write {provider}:<model>")
        return cls(provider=provider, model=model, base_url=base_url, api_key=api_key)

    def resolved_base_url(self) -> str | None:
        """The base URL: explicit, else EVSYS_BASE_URL, else the provider's default (None = OpenAI's)."""
        return self.base_url or os.environ.get("EVSYS_BASE_URL") or DEFAULT_BASE_URLS.get(self.provider)


def _valid() -> str:
    return ", ".join(PROVIDERS)


def create_model_client(spec: ModelSpec | str, **kwargs: Any) -> ModelClient:
    """Build the client for `spec` (a ModelSpec or a model string). Backends are imported lazily.

    Keyword arguments: `base_url`, `api_key` (when `spec` is a string), and backend options such as `retry`
    (a RetryPolicy) or, for `local`, `device` and `max_batch_size`.
    """
    if isinstance(spec, str):
        spec = ModelSpec.parse(
            spec, base_url=kwargs.pop("base_url", None), api_key=kwargs.pop("api_key", None)
        )
    if spec.provider == "local":
        from evsys.model.local.client import LocalModelClient

        return LocalModelClient.from_spec(spec, **kwargs)
    if spec.provider == "litellm":
        from evsys.model.litellm_client import LiteLLMClient

        return LiteLLMClient(spec, **kwargs)
    if spec.provider in ("openai", "vllm", "sglang", "llamacpp"):
        from evsys.model.openai_client import OpenAIClient

        return OpenAIClient(spec, **kwargs)
    raise UnknownModelError(f"no backend for provider {spec.provider!r}; valid providers: {_valid()}")
