"""Harness configuration (RFC 005 fields), the model endpoint a harness is pointed at, and environment tools.

`HarnessConfig` says how to run an external agent CLI: its command, working directory, extra environment,
where its MCP configuration file goes, and its timeouts (how evsys talks to the process is the adapter class's
business: `StdioHarnessAdapter`, `ProcessHarnessAdapter`, `PerTurnHarnessAdapter`).
`ModelEndpoint` is where its model calls go (normally a `ModelProxy` session). `EnvTool` is a tool the
environment offers the harness through MCP; only `domain` tools are ever bridged."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

if TYPE_CHECKING:
    from evsys.model.proxy.session import ProxySession

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


class HarnessConfig(BaseModel):
    """How to run one external harness (Claude Code, Codex, mini-swe-agent, a custom CLI...)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Short identifier, e.g. 'claude-code'.")
    command: list[str] = Field(min_length=1, description="argv of the harness process.")
    working_directory: str = Field("/app", description="cwd of the harness process.")
    env_vars: dict[str, str] = Field(default_factory=dict, description="Extra environment for the harness.")
    mcp_config_path: str | None = Field(
        None, description="Where the harness reads its MCP server configuration (written before start)."
    )
    startup_timeout_s: float = Field(30.0, gt=0, description="Longest wait for the harness to become ready.")
    session_timeout_s: float = Field(
        600.0,
        gt=0,
        description="Longest one turn (one send_message) may take; the harness is killed after it.",
    )
    model: str | None = Field(None, description="Model name the harness is told to use.")
    api_key_env_var: str | None = Field(
        None, description="Environment variable the harness reads its API key from (the proxy session key)."
    )

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"harness name {value!r} must be letters, digits, '.', '_' or '-'")
        return value

    @field_validator("command")
    @classmethod
    def _check_command(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("command[0] (the program to run) is empty")
        return value


@dataclass
class ModelEndpoint:
    """Where a harness sends its model calls: a base URL (no `/v1`), the key to use, and the model name.

    `session` is the proxy session behind that key, when there is one: the adapter turns its recorded calls
    into LLM_REQUEST / LLM_RESPONSE events."""

    base_url: str
    api_key: str
    model: str = "evsys"
    session: ProxySession | None = None

    @classmethod
    def for_session(cls, proxy_url: str, session: ProxySession, model: str | None = None) -> ModelEndpoint:
        """The endpoint of a proxy session (model name defaults to the session client's)."""
        return cls(proxy_url, session.key, model or session.model_client.model, session)


class EnvTool(BaseModel):
    """An environment tool; only `domain` tools are shown to harnesses (never reward or lifecycle ones)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    kind: Literal["domain", "reward", "lifecycle"] = "domain"

    @field_validator("name")
    @classmethod
    def _check_tool_name(cls, value: str) -> str:
        if not _TOOL_NAME.match(value):
            raise ValueError(f"tool name {value!r} must match {_TOOL_NAME.pattern}")
        return value


class InjectedTool(BaseModel):
    """A tool as the harness sees it: `exposed_name` (maybe `env_`-prefixed) maps back to `tool.name`."""

    exposed_name: str
    tool: EnvTool
