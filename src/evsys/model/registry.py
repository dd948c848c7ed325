"""Model providers by name: the one place a model backend plugs in.

A provider is a factory `factory(spec: ModelSpec, **options) -> ModelClient` plus `ProviderDefaults` (its
default base URL, whether a model name is required, default factory options). Built-in providers are
registered in `evsys.model.providers`; a third-party package adds one with `register_model_provider(...)` at
import time, or without any import by declaring an entry point in the `evsys.models` group:

    [project.entry-points."evsys.models"]
    tinker = "my_package.tinker:PROVIDER"     # a ModelProvider, or a bare factory (default settings)

Entry points are read lazily: only when a name is not registered in code, or when the names are listed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from evsys.util.registry import Registry, UnknownNameError

if TYPE_CHECKING:
    from evsys.model.base import ModelClient
    from evsys.model.spec import ModelSpec

ENTRY_POINT_GROUP = "evsys.models"

ModelFactory = Callable[..., "ModelClient"]
"""`factory(spec: ModelSpec, **options) -> ModelClient`; it imports heavy SDKs itself, when called."""


DEFAULT_TURN_MAX_TOKENS = 1024


class ProviderDefaults(BaseModel):
    """What a provider assumes when the model string and the caller leave something out."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str | None = Field(
        None, description="Endpoint used when neither --base-url nor EVSYS_BASE_URL."
    )
    requires_model: bool = Field(True, description="False: the bare provider name is a valid model string.")
    options: dict[str, Any] = Field(
        default_factory=dict, description="Factory keyword options; a ModelSpec's own options override them."
    )
    description: str = Field("", description="One line for `evsys model providers` and error messages.")
    api_key_env: str | None = Field(
        None, description="The environment variable holding the key the provider cannot work without."
    )
    model_is_path: bool = Field(
        False, description="The model name is a path on this machine (a model directory or a .gguf file)."
    )
    in_process: bool = Field(
        False,
        description="The model runs inside the process that builds the client (a local engine), so executors "
        "that run trials in other processes refuse it.",
    )
    probe_server: bool = Field(
        True, description="Pre-flight checks that the resolved base URL accepts connections."
    )
    turn_max_tokens: int = Field(
        DEFAULT_TURN_MAX_TOKENS,
        ge=1,
        description="Completion tokens per turn a model-driven agent asks for unless told (a slow in-process "
        "engine asks for fewer, so a turn ends within a task's agent timeout).",
    )
    agent_timeout_scale: float = Field(
        1.0,
        gt=0,
        description="A trial whose agent uses this provider's model gets the task's agent timeout times this "
        "(and the job's --agent-timeout-multiplier): a CPU engine's turns take longer than a server's.",
    )


@dataclass(frozen=True)
class ModelProvider:
    """A registered provider: its name, its client factory and its defaults."""

    name: str
    factory: ModelFactory
    defaults: ProviderDefaults = field(default_factory=ProviderDefaults)


def _from_entry_point(name: str, loaded: object) -> ModelProvider:
    if isinstance(loaded, ModelProvider):
        if loaded.name != name:
            return ModelProvider(name, loaded.factory, loaded.defaults)
        return loaded
    if callable(loaded):
        return ModelProvider(name, loaded)
    raise TypeError(f"expected a ModelProvider or a factory, got {type(loaded).__name__}")


MODEL_PROVIDERS: Registry[ModelProvider] = Registry("model provider", ENTRY_POINT_GROUP, _from_entry_point)
"""The registry itself (names, lookup, entry points); most code wants the functions below."""


def register_model_provider(
    name: str, factory: ModelFactory, defaults: ProviderDefaults | None = None, *, replace: bool = False
) -> ModelProvider:
    """Make `provider[:model]` strings with this `name` build clients with `factory`."""
    return MODEL_PROVIDERS.register(
        name, ModelProvider(name, factory, defaults or ProviderDefaults()), replace=replace
    )


def model_provider(name: str) -> ModelProvider:
    """The provider called `name`; `UnknownNameError` (a ValueError) lists the others, suggests close ones."""
    return MODEL_PROVIDERS.get(name)


def model_provider_names() -> list[str]:
    """Every available provider name: registered in code or installed as an `evsys.models` entry point."""
    return MODEL_PROVIDERS.names()


def check_provider(name: str) -> str:
    """`name` if a provider answers to it, else `UnknownNameError` (without loading any entry point)."""
    if name not in MODEL_PROVIDERS:
        raise UnknownNameError(MODEL_PROVIDERS.kind, name, MODEL_PROVIDERS.names())
    return name


def build_client(spec: ModelSpec, **options: Any) -> ModelClient:
    """The client for `spec`: the provider's factory with defaults < `spec.options` < `options`."""
    provider = model_provider(spec.provider)
    return provider.factory(spec, **{**provider.defaults.options, **spec.options, **options})


def provider_defaults(model: str | None) -> ProviderDefaults:
    """The defaults of the provider of `model` (a "provider:model" string); the built-in ones for no model or
    an unknown provider."""
    from evsys.model.spec import ModelSpec

    try:
        return model_provider(ModelSpec.parse(model or "").provider).defaults
    except ValueError:
        return ProviderDefaults()


def turn_max_tokens(model: str | None) -> int:
    """The completion tokens per turn a model-driven agent asks `model` for unless told (its provider's)."""
    return provider_defaults(model).turn_max_tokens
