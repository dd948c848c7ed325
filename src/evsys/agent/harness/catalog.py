"""The catalog of known harnesses: what to install for each and how to build its adapter inside a sandbox.

Each concrete integration module (`claude_code`, `codex`, `mini_swe_agent`, ...) defines one
`HarnessDefinition` named `DEFINITION`. `HarnessAgent` (evsys.agent.harness.agent) looks the definition up
by its `-a` name, installs the harness once (cached), starts the trial's sandbox with the install tree and
the proxy socket bound in, starts the in-sandbox forwarder, and calls `build(setup)` for an adapter that runs
the harness with the given launcher, pointed at the given endpoint.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from evsys.agent.harness.adapter import HarnessAdapter, McpEndpoint
    from evsys.agent.harness.config import ModelEndpoint
    from evsys.agent.harness.install import HarnessInstall
    from evsys.agent.harness.process import ProcessLauncher
    from evsys.records import Bind

Dialect = Literal["openai", "anthropic", "responses"]


@dataclass
class HarnessSetup:
    """Everything an adapter needs to run its harness inside a trial's sandbox."""

    launcher: ProcessLauncher
    endpoint: ModelEndpoint  # base_url like http://127.0.0.1:PORT (no /v1); api_key = the session key
    bin_dir: str  # where the installed executables are inside the sandbox
    workdir: str  # the task's working directory (the harness's cwd)
    home: str  # a writable HOME for the harness's user inside the sandbox
    mcp: McpEndpoint | None = None
    options: dict[str, Any] = field(default_factory=dict)  # the job's agent kwargs
    session_timeout_s: float = 600.0  # longest one turn may take


@dataclass(frozen=True)
class HarnessDefinition:
    """One harness evsys knows how to install and drive (`evsys run -a <name>`)."""

    name: str
    install: HarnessInstall | None  # None: the harness is already in the sandbox (or in `binds`)
    build: Callable[[HarnessSetup], HarnessAdapter]
    dialect: Dialect
    description: str = ""
    binds: tuple[Bind, ...] = ()  # extra host files the harness needs in its sandbox (read-only)


# -a name -> module defining DEFINITION (imported lazily: each pulls in only its own adapter)
HARNESS_MODULES: dict[str, str] = {
    "claude-code": "evsys.agent.harness.claude_code",
    "codex": "evsys.agent.harness.codex",
    "mini-swe-agent": "evsys.agent.harness.mini_swe_agent",
}


def harness_names() -> list[str]:
    """Names of the harnesses in the catalog."""
    return sorted(HARNESS_MODULES)


def get_definition(name: str) -> HarnessDefinition:
    """The definition of harness `name`; a clear error when the name is unknown."""
    module_name = HARNESS_MODULES.get(name)
    if module_name is None:
        raise KeyError(f"unknown harness {name!r}; known harnesses: {', '.join(harness_names())}")
    definition = importlib.import_module(module_name).DEFINITION
    if not isinstance(definition, HarnessDefinition):
        raise TypeError(f"{module_name}.DEFINITION is not a HarnessDefinition")
    return definition
