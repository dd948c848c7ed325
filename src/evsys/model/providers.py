"""The built-in model providers, registered by name (see `evsys.model.registry` for adding one).

| string                            | backend                                                          |
|-----------------------------------|------------------------------------------------------------------|
| `local`                           | in-process engine, default model (SmolLM2-135M-Instruct, offline) |
| `local:/path/to/hf-dir`           | in-process engine over any local Hugging Face model directory      |
| `openai:gpt-4.1`                  | the OpenAI API (OPENAI_API_KEY)                                   |
| `vllm:Qwen/Qwen3-8B`              | a vLLM server (--base-url, default http://localhost:8000/v1)       |
| `sglang:Qwen/Qwen3-8B`            | an SGLang server (default http://localhost:30000/v1)              |
| `llamacpp:model`                  | llama.cpp's llama-server (default http://localhost:8080/v1)       |
| `litellm:anthropic/claude-...`    | any provider LiteLLM knows (pip install evsys[litellm])            |
| `tinker:Qwen/Qwen3-8B`            | Tinker's sampling service (TINKER_API_KEY; pip install evsys[tinker]) |

Each factory imports its backend when called, so listing or checking providers loads no SDK."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from evsys.model.registry import ProviderDefaults, register_model_provider

if TYPE_CHECKING:
    from evsys.model.base import ModelClient
    from evsys.model.spec import ModelSpec


def local_engine(spec: ModelSpec, **options: Any) -> ModelClient:
    """The in-process transformers engine (options: `max_batch_size`, `name`)."""
    from evsys.model.local.client import LocalModelClient

    return LocalModelClient(spec.model, **options)


def openai_compatible(spec: ModelSpec, **options: Any) -> ModelClient:
    """An OpenAI-compatible chat-completions endpoint (options: see `OpenAIClient`)."""
    from evsys.model.openai_client import OpenAIClient

    return OpenAIClient(spec, **options)


def litellm(spec: ModelSpec, **options: Any) -> ModelClient:
    """Hosted providers through LiteLLM (the `litellm` extra)."""
    from evsys.model.litellm_client import LiteLLMClient

    return LiteLLMClient(spec, **options)


def tinker(spec: ModelSpec, **options: Any) -> ModelClient:
    """Tinker's sampling service through its SDK (the `tinker` extra; options: see `TinkerModelClient`)."""
    from evsys.model.tinker_client import TinkerModelClient

    return TinkerModelClient(spec, **options)


LOCAL_TURN_MAX_TOKENS = 96  # a tool call fits; at a loaded CPU's 2-17 tokens/s, a turn ends within a minute
LOCAL_AGENT_TIMEOUT_SCALE = 4.0  # a task's 60 s agent timeout leaves a CPU engine room for a few such turns


def _server(url: str, what: str, token_ids: bool) -> ProviderDefaults:
    options = {"return_token_ids": True} if token_ids else {}
    return ProviderDefaults(base_url=url, options=options, description=what)


register_model_provider(
    "local",
    local_engine,
    ProviderDefaults(
        requires_model=False,
        model_is_path=True,
        in_process=True,
        turn_max_tokens=LOCAL_TURN_MAX_TOKENS,
        agent_timeout_scale=LOCAL_AGENT_TIMEOUT_SCALE,
        description="in-process transformers engine (default: SmolLM2)",
    ),
)
register_model_provider(
    "openai",
    openai_compatible,
    ProviderDefaults(
        options={"api_key_required": True},
        api_key_env="OPENAI_API_KEY",
        description="the OpenAI API (OPENAI_API_KEY)",
    ),
)
register_model_provider("vllm", openai_compatible, _server("http://localhost:8000/v1", "a vLLM server", True))
register_model_provider(
    "sglang", openai_compatible, _server("http://localhost:30000/v1", "an SGLang server", True)
)
register_model_provider(
    "llamacpp", openai_compatible, _server("http://localhost:8080/v1", "llama.cpp's llama-server", False)
)
register_model_provider(
    "litellm",
    litellm,
    ProviderDefaults(
        probe_server=False, description="any provider LiteLLM knows (pip install 'evsys[litellm]')"
    ),
)
register_model_provider(
    "tinker",
    tinker,
    ProviderDefaults(
        api_key_env="TINKER_API_KEY",
        description="Tinker's sampling service, token-native (TINKER_API_KEY; pip install 'evsys[tinker]')",
    ),
)
