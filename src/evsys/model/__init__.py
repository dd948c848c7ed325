"""Talking to models: the `ModelClient` protocol, its records, errors, retries and the model-string grammar.

Backends (imported lazily by `create_model_client`): `local` (in-process transformers engine), `openai`,
`vllm`, `sglang`, `llamacpp` (OpenAI-compatible servers), `litellm` (hosted providers, optional extra)."""

from evsys.model.base import Completion, Message, ModelClient, SamplingParams, ToolCall, ToolSchema, Usage
from evsys.model.errors import (
    AuthenticationError,
    ContextOverflowError,
    InvalidRequestError,
    ModelError,
    QuotaExceededError,
    RetryableModelError,
    UnknownModelError,
)
from evsys.model.retry import RetryPolicy, call_with_retries
from evsys.model.spec import PROVIDERS, ModelSpec, create_model_client

__all__ = [
    "PROVIDERS",
    "AuthenticationError",
    "Completion",
    "ContextOverflowError",
    "InvalidRequestError",
    "Message",
    "ModelClient",
    "ModelError",
    "ModelSpec",
    "QuotaExceededError",
    "RetryPolicy",
    "RetryableModelError",
    "SamplingParams",
    "ToolCall",
    "ToolSchema",
    "UnknownModelError",
    "Usage",
    "call_with_retries",
    "create_model_client",
]
