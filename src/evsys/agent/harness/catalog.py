"""The catalog of known harnesses: what to install for each and how to build its adapter inside a sandbox.

Each concrete integration module (`claude_code`, `codex`, `mini_swe_agent`, ...) defines one
`HarnessDefinition` named `DEFINITION`. `HarnessAgent` (evsys.agent.harness.agent) looks the definition up
by its `-a` name, installs the harness once (cached), starts the trial's sandbox with the install tree and
the proxy socket bound in, starts the in-sandbox forwarder, and calls `build(setup)` for an adapter that runs
the harness with the given launcher, pointed at the given endpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from evsys.util.registry import Registry

if TYPE_CHECKING:
    from evsys.agent.harness.adapter import HarnessAdapter, McpEndpoint
    from evsys.agent.harness.config import ModelEndpoint
    from evsys.agent.harness.install import HarnessInstall
    from evsys.agent.harness.process import ProcessLauncher
    from evsys.records import Bind
    from evsys.task.models import McpServerConfig

Dialect = Literal["openai", "anthropic", "responses", "google"]


@dataclass
class HarnessSetup:
    """Everything an adapter needs to run its harness inside a trial's sandbox."""

    launcher: ProcessLauncher
    endpoint: ModelEndpoint  # base_url like http://127.0.0.1:PORT (no /v1); api_key = the session key
    bin_dir: str  # where the installed executables are inside the sandbox
    workdir: str  # the task's working directory (the harness's cwd)
    home: str  # a writable HOME for the harness's user inside the sandbox
    mcp: McpEndpoint | None = None  # the injected environment tools' server (--harness-mcp-tools)
    mcp_servers: list[McpServerConfig] = field(default_factory=list)  # the task's `[environment] mcp_servers`
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


def _definition(name: str, loaded: object) -> HarnessDefinition:
    if not isinstance(loaded, HarnessDefinition):
        raise TypeError(f"harness {name!r} is {type(loaded).__name__}, not a HarnessDefinition")
    return loaded


HARNESSES: Registry[HarnessDefinition] = Registry("harness", "evsys.harnesses", _definition)
"""`-a` name -> definition. Each built-in (declared in evsys.util.builtin_plugins) defines `DEFINITION`,
imported only when its name is used (each pulls in only its own adapter); a package adds one through the
`evsys.harnesses` entry-point group."""


def harness_names() -> list[str]:
    """Names of the harnesses in the catalog."""
    return HARNESSES.names()


def is_acp_command(name: str) -> bool:
    """Whether `name` is an `acp:<command>` harness (any ACP agent, by its command line)."""
    return name.startswith("acp:")


def get_definition(name: str) -> HarnessDefinition:
    """The definition of harness `name` (a catalog name or `acp:<command>`); `UnknownNameError` (a
    ValueError) listing the known ones."""
    if is_acp_command(name):
        from evsys.agent.harness.acp_command import command_definition

        return command_definition(name)
    return HARNESSES.get(name)
