"""Resolving agent names: built-ins, module:Class with kwargs, and clear errors for everything else."""

from __future__ import annotations

import pytest

from evsys.agent import Agent, AgentNotFoundError, NopAgent, OracleAgent, parse_agent_kwarg, resolve_agent


class KwargAgent(Agent):
    """An agent taking kwargs, used through `tests.agent.test_agent_registry:KwargAgent`."""

    name = "kwarg-agent"

    def __init__(self, temperature: float = 0.0, label: str = "x") -> None:
        self.temperature = temperature
        self.label = label

    async def setup(self, sandbox, ctx):
        return None

    async def run(self, instruction, sandbox, ctx):
        return None


class NotAnAgent:
    pass


def test_builtins_resolve():
    assert isinstance(resolve_agent("oracle"), OracleAgent)
    assert isinstance(resolve_agent("nop"), NopAgent)


def test_custom_class_gets_kwargs():
    agent = resolve_agent(f"{__name__}:KwargAgent", {"temperature": 0.7, "label": "hi"})
    assert (agent.temperature, agent.label) == (0.7, "hi")


def test_unknown_name_lists_the_builtins_and_guesses():
    expected = r"unknown agent 'claude' \(did you mean 'claude-code'\?\); built-in agents: .*nop, .*oracle"
    with pytest.raises(AgentNotFoundError, match=expected):
        resolve_agent("claude")


def test_missing_module_and_attribute_are_named():
    with pytest.raises(AgentNotFoundError, match="cannot import module 'no_such_module_xyz'"):
        resolve_agent("no_such_module_xyz:Agent")
    with pytest.raises(AgentNotFoundError, match=f"module '{__name__}' has no 'Missing'"):
        resolve_agent(f"{__name__}:Missing")


def test_bad_kwargs_and_non_agents_are_refused():
    with pytest.raises(AgentNotFoundError, match="cannot be built with kwargs"):
        resolve_agent(f"{__name__}:KwargAgent", {"nope": 1})
    with pytest.raises(AgentNotFoundError, match=r"NotAnAgent must subclass evsys.agent.Agent"):
        resolve_agent(f"{__name__}:NotAnAgent")


def test_agent_kwargs_parse_json_values_else_strings():
    assert parse_agent_kwarg("temperature=0.5") == ("temperature", 0.5)
    assert parse_agent_kwarg("flag=true") == ("flag", True)
    assert parse_agent_kwarg("name=hello world") == ("name", "hello world")
    with pytest.raises(ValueError, match="not of the form key=value"):
        parse_agent_kwarg("novalue")
