"""Gemini CLI (npm `@google/gemini-cli`) as an evsys harness, driven over ACP (`gemini --acp`).

Gemini CLI speaks only Google's `generateContent` / `streamGenerateContent` API; the recording proxy serves
it (`evsys.model.proxy.google_dialect`). The CLI is pointed at the proxy with `GOOGLE_GEMINI_BASE_URL` and the
session key as `GEMINI_API_KEY`; `prepare()` writes `~/.gemini/settings.json`: API-key auth (so the base
URL applies without Google sign-in), folder trust off (the sandbox is the boundary), no usage statistics,
telemetry, auto-update or update nag, and, when environment tools are injected, nothing (the MCP server is
given in ACP's `session/new`).
"""

from __future__ import annotations

import json
from typing import Any

from evsys.agent.harness.acp_adapter import AcpHarnessAdapter
from evsys.agent.harness.catalog import HarnessDefinition, HarnessSetup
from evsys.agent.harness.config import HarnessConfig
from evsys.agent.harness.install import HarnessInstall

GEMINI_CLI_VERSION = "0.61.0"
API_KEY_VAR = "GEMINI_API_KEY"
INSTALL = HarnessInstall(
    manager="npm",
    packages=[f"@google/gemini-cli@{GEMINI_CLI_VERSION}"],
    prefix="/opt/evsys-harness/gemini-cli",
)
SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}


class GeminiCliAdapter(AcpHarnessAdapter):
    """`gemini --acp` against the proxy's Google API endpoints."""

    auth_method = "gemini-api-key"

    def __init__(self, config: HarnessConfig, *, home: str, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.home = home.rstrip("/")

    def environment(self) -> dict[str, str]:
        """HOME, PATH with the install's bin directory, the proxy's base URL and the session key."""
        bin_dir = self.config.command[0].rpartition("/")[0] or "/usr/bin"
        env = {"HOME": self.home, "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "NO_COLOR": "1"}
        if self.endpoint is not None:
            env |= {
                "GOOGLE_GEMINI_BASE_URL": self.endpoint.base_url.rstrip("/"),
                API_KEY_VAR: self.endpoint.api_key,
            }
        return {**env, **self.config.env_vars}

    async def prepare(self) -> None:
        """Write `~/.gemini/settings.json`."""
        if self.endpoint is None:
            raise ValueError("the gemini-cli harness needs a model endpoint (the proxy session)")
        text = json.dumps(SETTINGS, indent=2) + "\n"
        await self.launcher.write_file(f"{self.home}/.gemini/settings.json", text.encode())


def build(setup: HarnessSetup) -> GeminiCliAdapter:
    """A Gemini CLI adapter for a trial sandbox (`-a gemini-cli`); options `model`, `extra_args`."""
    model = setup.options.get("model") or setup.endpoint.model
    extra = [str(a) for a in setup.options.get("extra_args", [])]
    config = HarnessConfig(
        name="gemini-cli",
        command=[f"{setup.bin_dir}/gemini", "--acp", "--model", model, *extra],
        working_directory=setup.workdir,
        session_timeout_s=setup.session_timeout_s,
        startup_timeout_s=120,
        model=model,
        api_key_env_var=API_KEY_VAR,
    )
    return GeminiCliAdapter(
        config,
        home=setup.home,
        launcher=setup.launcher,
        endpoint=setup.endpoint,
        mcp=setup.mcp,
        mcp_servers=setup.mcp_servers,
    )


DEFINITION = HarnessDefinition(
    name="gemini-cli",
    install=INSTALL,
    build=build,
    dialect="google",
    description="Google Gemini CLI over ACP (gemini --acp, generateContent API through the evsys proxy)",
)
