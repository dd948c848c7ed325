"""Fixtures for harness tests: a recording proxy over the tiny model, the tiny harness as a real process."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from stream_agents import tiny_definition
from tiny_harness_config import tiny_config

from evsys.agent.harness import ModelEndpoint, StdioHarnessAdapter
from evsys.agent.harness.agent import HarnessAgent
from evsys.agent.registry import AGENTS, register_agent
from evsys.model.local.client import LocalModelClient
from evsys.model.proxy import ModelProxy, ProxySession
from evsys.testing.tiny_model import DEMO_RECIPE, LONG_CONTEXT_RECIPE, build_tiny_model


@pytest.fixture(scope="session")
def tiny_engine_client() -> LocalModelClient:
    """A client over the demo tiny model (trained to call `bash ls` and to greet)."""
    return LocalModelClient(str(build_tiny_model(DEMO_RECIPE)))


@pytest.fixture(scope="session")
def long_context_client() -> LocalModelClient:
    """A client over an untrained tiny model with a 128k context: real harnesses send very long prompts."""
    return LocalModelClient(str(build_tiny_model(LONG_CONTEXT_RECIPE)))


@pytest.fixture
async def harness_proxy(long_context_client):
    """A started recording proxy over the long-context tiny model (short completions)."""
    async with ModelProxy(long_context_client, max_tokens_cap=24) as started:
        yield started


@pytest.fixture
async def proxy(tiny_engine_client):
    """A started recording proxy over the tiny model."""
    async with ModelProxy(tiny_engine_client, max_tokens_cap=48) as started:
        yield started


@pytest.fixture
async def make_adapter(proxy, tmp_path) -> Callable[..., tuple[StdioHarnessAdapter, ProxySession]]:
    """Build a tiny-harness adapter with its own proxy session; every adapter built is stopped afterwards."""
    built: list[StdioHarnessAdapter] = []

    def make(*args: str, **overrides: object) -> tuple[StdioHarnessAdapter, ProxySession]:
        session = proxy.open_session()
        endpoint = ModelEndpoint.for_session(proxy.url, session)
        adapter = StdioHarnessAdapter(tiny_config(tmp_path, *args, **overrides), endpoint=endpoint)
        built.append(adapter)
        return adapter, session

    yield make
    for adapter in built:
        await adapter.stop()


@pytest.fixture
def tiny_agent() -> Iterator[Callable[..., str]]:
    """`tiny_agent(name, *args, **config)` registers the tiny harness (with those arguments) as agent `name`
    and returns the name; every agent registered is unregistered after the test."""
    names: list[str] = []

    def register(name: str, *args: str, **kw: float) -> str:
        definition = tiny_definition(name, *args, **kw)
        register_agent(name, lambda **options: HarnessAgent(definition, **options))
        names.append(name)
        return name

    yield register
    for name in names:
        AGENTS.unregister(name)
