"""Talking to models: the `ModelClient` protocol, its records, errors, retries, the model-string grammar and
the provider registry.

Providers are looked up by name (`evsys.model.registry`; built-ins in `evsys.model.providers`): `local`
(in-process transformers engine), `openai`, `vllm`, `sglang`, `llamacpp` (OpenAI-compatible servers),
`litellm` (hosted providers, optional extra), plus any `evsys.models` entry point. `render/` turns chats into
prompt token ids and completion ids back into text and tool calls; `openai_wire` is the OpenAI HTTP format
that `serve` and the `proxy` speak."""

from evsys.model import providers as _builtin_providers  # noqa: F401  (registers the built-ins)
from evsys.model.base import ChatCompleter, Completion, Message, ModelClient, SamplingParams, ToolSchema
from evsys.model.errors import (
    AuthenticationError,
    ContextOverflowError,
    InvalidRequestError,
    ModelError,
    QuotaExceededError,
    RetryableModelError,
    UnknownModelError,
)
from evsys.model.registry import (
    ModelProvider,
    ProviderDefaults,
    model_provider,
    model_provider_names,
    register_model_provider,
)
from evsys.model.retry import RetryPolicy, call_with_retries
from evsys.model.spec import ModelSpec, create_model_client

__all__ = [
    "AuthenticationError",
    "ChatCompleter",
    "Completion",
    "ContextOverflowError",
    "InvalidRequestError",
    "Message",
    "ModelClient",
    "ModelError",
    "ModelProvider",
    "ModelSpec",
    "ProviderDefaults",
    "QuotaExceededError",
    "RetryPolicy",
    "RetryableModelError",
    "SamplingParams",
    "ToolSchema",
    "UnknownModelError",
    "call_with_retries",
    "create_model_client",
    "model_provider",
    "model_provider_names",
    "register_model_provider",
]
