"""Agents by name: `AGENTS` (an `evsys.util.registry.Registry`, entry-point group `evsys.agents`) holds the
built-ins (`oracle`, `nop`, `loop`, declared in evsys.util.builtin_plugins) and whatever registers itself;
every harness of the catalog (`evsys.agent.harness.catalog.HARNESSES`) is an agent of the same name; and a
custom class can be named as `module:Class` (or `module.path:Class`).

Each name resolves to an `AgentPlugin`: how to build the agent and whether it uses a model (the agent
class's `model_use`), which is all pre-flight and the engine ask of a name. Agents are built with the job's
agent kwargs (`--agent-kwarg key=value`). Every failure is an `AgentNotFoundError` whose message names the
agent and what was wrong.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError

from evsys.agent.base import Agent, ModelUse
from evsys.agent.harness.catalog import HARNESSES, is_acp_command
from evsys.util.registry import Registry, did_you_mean

AgentFactory = Callable[..., Agent]
T = TypeVar("T")


class AgentNotFoundError(ValueError):
    """The agent name is unknown, its module cannot be imported, or its class cannot be built."""


@dataclass(frozen=True)
class AgentPlugin:
    """A named agent: `factory(**kwargs) -> Agent`, and whether it uses a model (`Agent.model_use`)."""

    factory: AgentFactory
    model_use: ModelUse = "optional"


def _plugin(name: str, loaded: object) -> AgentPlugin:
    if isinstance(loaded, AgentPlugin):
        return loaded
    if isinstance(loaded, type) and issubclass(loaded, Agent):
        return AgentPlugin(loaded, loaded.model_use)
    if callable(loaded):
        return AgentPlugin(loaded)
    raise TypeError(f"agent {name!r} is {type(loaded).__name__}, not an Agent subclass or a factory")


AGENTS: Registry[AgentPlugin] = Registry("agent", "evsys.agents", _plugin, load_error=AgentNotFoundError)


def register_agent(
    name: str, factory: AgentFactory | str, *, model_use: ModelUse | None = None, replace: bool = True
) -> None:
    """Make `name` resolvable: `factory` takes the agent kwargs, or is a lazy `module:Class` path. An
    `Agent` subclass declares its own `model_use`; for another factory pass it (default "optional")."""
    if isinstance(factory, str):
        AGENTS.register_lazy(name, factory, replace=replace)
    elif model_use is not None:
        AGENTS.register(name, AgentPlugin(factory, model_use), replace=replace)
    else:
        AGENTS.register(name, _plugin(name, factory), replace=replace)


def agent_names() -> list[str]:
    """Every name `resolve_agent` knows without a `module:Class` path: registered agents and harnesses."""
    return sorted({*AGENTS.names(), *HARNESSES.names()})


def parse_agent_kwarg(text: str) -> tuple[str, Any]:
    """Parse one `key=value` agent kwarg; the value is read as JSON when it parses (numbers, true, lists)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"agent kwarg '{text}' is not of the form key=value")
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


def _import_class(path: str, agent_name: str) -> Any:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise AgentNotFoundError(f"agent '{agent_name}': expected 'module:Class', got '{path}'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentNotFoundError(
            f"agent '{agent_name}': cannot import module '{module_name}': {exc}"
        ) from exc
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise AgentNotFoundError(
                f"agent '{agent_name}': module '{module_name}' has no '{attr}'"
            ) from None
    return target


def _harness_plugin(name: str) -> AgentPlugin:
    def build(**kwargs: Any) -> Agent:
        from evsys.agent.harness.agent import HarnessAgent

        return HarnessAgent(name, **kwargs)

    return AgentPlugin(build, "required")


def agent_plugin(name: str) -> AgentPlugin:
    """How to build the agent called `name` and what model it needs; `AgentNotFoundError` when unknown."""
    if name in AGENTS:
        return AGENTS.get(name)
    if is_acp_command(name):  # before module:Class, which it would look like
        return _harness_plugin(name)
    if ":" in name:
        try:
            return _plugin(name, _import_class(name, name))
        except TypeError as exc:
            raise AgentNotFoundError(f"agent '{name}': {exc}") from None
    if name in HARNESSES:
        return _harness_plugin(name)
    names = agent_names()
    raise AgentNotFoundError(
        f"unknown agent '{name}'{did_you_mean(name, names)}; built-in agents: {', '.join(names)}; "
        "or give a custom agent class as 'module:Class'"
    )


def uses_model(name: str) -> bool:
    """True when the agent called `name` talks to a model: every agent but a model-free one (oracle, nop; an
    unknown name counts as one that does: resolving it fails later, with its own message)."""
    try:
        return agent_plugin(name).model_use != "none"
    except AgentNotFoundError:
        return True


def talks_to_model(name: str, model: str | None) -> bool:
    """True when the agent called `name`, given `model`, talks to it (`uses_model`, and a model is given)."""
    return model is not None and uses_model(name)


def _kwargs_message(name: str, exc: ValidationError) -> str:
    """One line per bad kwarg, without pydantic's links: unknown names get the valid ones and a guess."""
    lines = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "(kwargs)"
        if error["type"] == "extra_forbidden":
            valid = _valid_kwargs(exc)
            lines.append(
                f"unknown --agent-kwarg '{key}'{did_you_mean(key, valid)}; valid: {', '.join(valid)}"
            )
        else:
            lines.append(f"--agent-kwarg '{key}': {error['msg']}")
    return f"agent '{name}': " + "; ".join(lines)


def _valid_kwargs(exc: ValidationError) -> list[str]:
    """The field names of the pydantic model `exc` came from (agents validate kwargs with one)."""
    from pydantic import BaseModel

    models: dict[str, type[BaseModel]] = {cls.__name__: cls for cls in _subclasses(BaseModel)}
    model = models.get(exc.title)
    return sorted(model.model_fields) if model is not None else []


def _subclasses(cls: type[T]) -> list[type[T]]:
    out: list[type[T]] = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def resolve_agent(name: str, kwargs: dict[str, Any] | None = None) -> Agent:
    """Build the agent called `name` with `kwargs`; `AgentNotFoundError` with a clear message on failure."""
    factory = agent_plugin(name).factory
    try:
        agent = factory(**(kwargs or {}))
    except ValidationError as exc:
        raise AgentNotFoundError(_kwargs_message(name, exc)) from None
    except TypeError as exc:
        raise AgentNotFoundError(f"agent '{name}' cannot be built with kwargs {kwargs or {}}: {exc}") from exc
    if not isinstance(agent, Agent):
        raise AgentNotFoundError(
            f"agent '{name}' is not an agent: {type(agent).__name__} must subclass evsys.agent.Agent "
            "(implementing setup() and run())"
        )
    if not agent.name:
        agent.name = name.rsplit(":", 1)[-1]
    return agent
