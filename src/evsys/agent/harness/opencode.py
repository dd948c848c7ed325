"""opencode (npm `opencode-ai`) as an evsys harness, driven over ACP (`opencode acp`).

`prepare()` writes `~/.config/opencode/opencode.json`: one provider `evsys` (the bundled
`@ai-sdk/openai-compatible` package) at the proxy's `/v1` chat-completions endpoint with the session key read
from `EVSYS_OPENCODE_API_KEY`, the model as both `model` and `small_model` (titles and summaries go through
the proxy too), no autoupdate or sharing, and every tool permission `allow` (the sandbox is the boundary;
opencode then asks for none). `OPENCODE_DISABLE_MODELS_FETCH` keeps it from fetching the models.dev catalog.
opencode also tries to install its plugin package into the config directory at startup; without network
that fails in the background and the session runs anyway.
"""

from __future__ import annotations

import json
from typing import Any

from evsys.agent.harness.acp_adapter import AcpHarnessAdapter
from evsys.agent.harness.catalog import HarnessDefinition, HarnessSetup
from evsys.agent.harness.config import HarnessConfig
from evsys.agent.harness.install import HarnessInstall

OPENCODE_VERSION = "1.18.33"
API_KEY_VAR = "EVSYS_OPENCODE_API_KEY"
PROVIDER_ID = "evsys"
INSTALL = HarnessInstall(
    manager="npm", packages=[f"opencode-ai@{OPENCODE_VERSION}"], prefix="/opt/evsys-harness/opencode"
)
QUIET_ENV = {
    "OPENCODE_DISABLE_MODELS_FETCH": "true",
    "OPENCODE_DISABLE_AUTOUPDATE": "true",
    "OPENCODE_DISABLE_SHARE": "true",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "true",
}


def render_config(*, base_url: str, model: str) -> dict[str, Any]:
    """The `opencode.json` pointing opencode at the proxy (`base_url` without `/v1`)."""
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "evsys proxy",
        "options": {"baseURL": base_url.rstrip("/") + "/v1", "apiKey": f"{{env:{API_KEY_VAR}}}"},
        "models": {model: {"name": model}},
    }
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {PROVIDER_ID: provider},
        "model": f"{PROVIDER_ID}/{model}",
        "small_model": f"{PROVIDER_ID}/{model}",
        "autoupdate": False,
        "share": "disabled",
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "allow"},
    }


class OpencodeAdapter(AcpHarnessAdapter):
    """`opencode acp` against the proxy's chat-completions endpoint."""

    def __init__(self, config: HarnessConfig, *, home: str, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.home = home.rstrip("/")

    def environment(self) -> dict[str, str]:
        """HOME and XDG directories under it, PATH, the session key, the no-network switches."""
        bin_dir = self.config.command[0].rpartition("/")[0] or "/usr/bin"
        env = {
            "HOME": self.home,
            "XDG_CONFIG_HOME": f"{self.home}/.config",
            "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "NO_COLOR": "1",
            **QUIET_ENV,
        }
        if self.endpoint is not None:
            env[API_KEY_VAR] = self.endpoint.api_key
        return {**env, **self.config.env_vars}

    async def prepare(self) -> None:
        """Write `~/.config/opencode/opencode.json`."""
        if self.endpoint is None:
            raise ValueError("the opencode harness needs a model endpoint (the proxy session)")
        model = self.config.model or self.endpoint.model
        text = json.dumps(render_config(base_url=self.endpoint.base_url, model=model), indent=2) + "\n"
        await self.launcher.write_file(f"{self.home}/.config/opencode/opencode.json", text.encode())


def build(setup: HarnessSetup) -> OpencodeAdapter:
    """An opencode adapter for a trial sandbox (`-a opencode`); option `model` overrides the model name."""
    config = HarnessConfig(
        name="opencode",
        command=[f"{setup.bin_dir}/opencode", "acp"],
        working_directory=setup.workdir,
        session_timeout_s=setup.session_timeout_s,
        startup_timeout_s=120,
        model=setup.options.get("model"),
        api_key_env_var=API_KEY_VAR,
    )
    return OpencodeAdapter(
        config,
        home=setup.home,
        launcher=setup.launcher,
        endpoint=setup.endpoint,
        mcp=setup.mcp,
        mcp_servers=setup.mcp_servers,
    )


DEFINITION = HarnessDefinition(
    name="opencode",
    install=INSTALL,
    build=build,
    dialect="openai",
    description="opencode over ACP (opencode acp, chat completions through the evsys proxy)",
)
