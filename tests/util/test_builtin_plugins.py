"""evsys's own plug-ins are declared once (evsys.util.builtin_plugins): every registry answers to each of its
group's built-ins, each resolves to the object its path names, pyproject.toml declares none of them a second
time, and shell completion offers every one of them."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest

from evsys.agent.harness.catalog import HARNESSES
from evsys.agent.registry import AGENTS
from evsys.cli.complete import complete_agent, complete_executor, complete_sandbox
from evsys.engine.executor_plugins import EXECUTORS
from evsys.sandbox.registry import SANDBOXES
from evsys.util.builtin_plugins import BUILTIN_PLUGINS
from evsys.util.registry import Registry

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
REGISTRIES: dict[str, Registry] = {
    "evsys.sandboxes": SANDBOXES,
    "evsys.agents": AGENTS,
    "evsys.harnesses": HARNESSES,
    "evsys.executors": EXECUTORS,
}
BUILTINS = [
    (group, name, target) for group, names in BUILTIN_PLUGINS.items() for name, target in names.items()
]


def test_every_group_of_the_table_has_its_registry():
    assert set(BUILTIN_PLUGINS) == set(REGISTRIES)
    assert all(registry.group == group for group, registry in REGISTRIES.items())


@pytest.mark.parametrize(("group", "name", "target"), BUILTINS, ids=[f"{g}:{n}" for g, n, _ in BUILTINS])
def test_each_builtin_is_registered_and_names_a_real_object(group, name, target):
    registry = REGISTRIES[group]
    assert name in registry
    module, _, attribute = target.partition(":")
    assert hasattr(importlib.import_module(module), attribute), target


def test_pyproject_declares_no_builtin_again():
    declared = tomllib.loads(PYPROJECT.read_text())["project"].get("entry-points", {})
    twice = {
        group: sorted(set(declared.get(group, {})) & set(names)) for group, names in BUILTIN_PLUGINS.items()
    }
    assert twice == {group: [] for group in BUILTIN_PLUGINS}


def test_completion_offers_every_builtin():
    """`evsys run -a <Tab>` lists every built-in agent and harness (the ACP harnesses too), `--sandbox` and
    `--executor` every built-in backend and executor."""
    assert set(BUILTIN_PLUGINS["evsys.agents"]) | set(BUILTIN_PLUGINS["evsys.harnesses"]) <= set(
        complete_agent("")
    )
    assert complete_agent("gemini") == ["gemini-cli"]
    assert set(BUILTIN_PLUGINS["evsys.sandboxes"]) <= set(complete_sandbox(""))
    assert set(BUILTIN_PLUGINS["evsys.executors"]) <= set(complete_executor(""))
