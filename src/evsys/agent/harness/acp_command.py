"""`-a acp:<command>`: any ACP agent already present in the sandbox (the task image or a bind), run as
`<command>` (split like a shell would, without a shell) and driven by `AcpHarnessAdapter`.

evsys installs nothing for it. The process gets a writable HOME, and the proxy session in every dialect the
proxy serves, so the agent can use whichever its model client speaks: `OPENAI_BASE_URL` (`.../v1`) and
`OPENAI_API_KEY`, `ANTHROPIC_BASE_URL` and `ANTHROPIC_API_KEY`, `GOOGLE_GEMINI_BASE_URL` and `GEMINI_API_KEY`,
and the model name as `EVSYS_MODEL`. Job options: `model` (the model name), `env` (extra variables)."""

from __future__ import annotations

import shlex
from typing import Any

from evsys.agent.harness.acp_adapter import AcpHarnessAdapter
from evsys.agent.harness.catalog import HarnessDefinition, HarnessSetup
from evsys.agent.harness.config import HarnessConfig

ACP_PREFIX = "acp:"


class AcpCommandAdapter(AcpHarnessAdapter):
    """An ACP agent given by its command line, pointed at the proxy in every dialect."""

    def __init__(self, config: HarnessConfig, *, home: str, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.home = home.rstrip("/")

    def environment(self) -> dict[str, str]:
        """HOME, the proxy endpoint in the OpenAI, Anthropic and Google shapes, then the job's variables."""
        env = {"HOME": self.home, "PATH": "/usr/local/bin:/usr/bin:/bin", **self.model_env()}
        if self.endpoint is not None:
            base, key = self.endpoint.base_url.rstrip("/"), self.endpoint.api_key
            env |= {"ANTHROPIC_BASE_URL": base, "ANTHROPIC_API_KEY": key}
            env |= {"GOOGLE_GEMINI_BASE_URL": base, "GEMINI_API_KEY": key}
        return {**env, **self.config.env_vars}


def command_definition(name: str) -> HarnessDefinition:
    """The definition behind `-a acp:<command>`; ValueError when the command is empty or unparsable."""
    if not name.startswith(ACP_PREFIX):
        raise ValueError(f"an ACP command harness is named 'acp:<command>', got {name!r}")
    try:
        argv = shlex.split(name[len(ACP_PREFIX) :])
    except ValueError as exc:
        raise ValueError(f"harness {name!r}: the command cannot be split: {exc}") from None
    if not argv:
        raise ValueError("harness 'acp:': give the ACP agent's command after 'acp:'")

    def build(setup: HarnessSetup) -> AcpCommandAdapter:
        config = HarnessConfig(
            name="acp",
            command=argv,
            working_directory=setup.workdir,
            session_timeout_s=setup.session_timeout_s,
            startup_timeout_s=120,
            model=setup.options.get("model"),
            env_vars={str(k): str(v) for k, v in dict(setup.options.get("env") or {}).items()},
            api_key_env_var="OPENAI_API_KEY",
        )
        return AcpCommandAdapter(
            config,
            home=setup.home,
            launcher=setup.launcher,
            endpoint=setup.endpoint,
            mcp=setup.mcp,
            mcp_servers=setup.mcp_servers,
        )

    return HarnessDefinition(
        name=name,
        install=None,
        build=build,
        dialect="openai",
        description=f"an ACP agent run as {shlex.join(argv)}",
    )
