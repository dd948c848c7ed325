"""OpenClaw (npm `openclaw`) as an evsys harness: its Gateway and its ACP bridge (`openclaw acp`) in the
sandbox, on a Node.js 24 runtime installed from the npm registry into the harness cache (OpenClaw needs
Node >= 24.16; the host's Node is not used).

`openclaw acp` is a bridge: it speaks ACP on stdio and forwards each prompt to an OpenClaw Gateway over
WebSocket, where OpenClaw's own agent runtime runs the turn (its own tools: the bridge never asks the ACP
client for files or terminals). So `start()` first writes `~/.openclaw/openclaw.json` (local Gateway mode
on the sandbox's loopback, token auth with a fresh token, one model provider `evsys` on the OpenAI
chat-completions API at the proxy's `/v1`, as the only provider; the task's working directory as the
agent workspace with no bootstrap files written into it; update checks and telemetry off), starts
`openclaw gateway run` and waits for its `ready` line, then launches the bridge with the token file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
from typing import Any

from evsys.agent.harness.acp_adapter import AcpHarnessAdapter
from evsys.agent.harness.adapter import HarnessStartError
from evsys.agent.harness.catalog import HarnessDefinition, HarnessSetup
from evsys.agent.harness.config import HarnessConfig
from evsys.agent.harness.install import HarnessInstall
from evsys.agent.harness.process import HarnessProcess

OPENCLAW_VERSION = "2026.9.6"
NODE_VERSION = "24.21.0"
GATEWAY_PORT = 18789  # on the sandbox's own loopback (its own network namespace)
PROVIDER_ID = "evsys"
INSTALL = HarnessInstall(
    manager="npm",
    packages=[f"openclaw@{OPENCLAW_VERSION}"],
    node=NODE_VERSION,
    prefix="/opt/evsys-harness/openclaw",
)
READY = re.compile(rb"\[gateway\]\s+ready\b")
ANSI = re.compile(rb"\x1b\[[0-9;]*m")
QUIET_ENV = {"OPENCLAW_NO_AUTO_UPDATE": "1", "NO_COLOR": "1", "FORCE_COLOR": "0"}


def render_config(*, base_url: str, model: str, api_key: str, workspace: str, token: str) -> dict[str, Any]:
    """`openclaw.json`: a local loopback Gateway with token auth and the proxy as the only model provider."""
    entry = {
        "id": model,
        "name": model,
        "reasoning": False,
        "input": ["text"],
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
        "contextWindow": 131072,
        "maxTokens": 8192,
    }
    provider = {
        "baseUrl": base_url.rstrip("/") + "/v1",
        "apiKey": api_key,
        "api": "openai-completions",
        "models": [entry],
    }
    return {
        "gateway": {
            "mode": "local",
            "bind": "loopback",
            "port": GATEWAY_PORT,
            "auth": {"mode": "token", "token": token},
        },
        "update": {"checkOnStart": False},
        "telemetry": {"enabled": False},
        "agents": {
            "defaults": {
                "workspace": workspace,
                "skipBootstrap": True,
                "model": {"primary": f"{PROVIDER_ID}/{model}"},
            }
        },
        "models": {"mode": "replace", "providers": {PROVIDER_ID: provider}},
    }


class OpenClawAdapter(AcpHarnessAdapter):
    """The OpenClaw Gateway and its ACP bridge (`openclaw acp --url ws://127.0.0.1:<port>`) in the sandbox."""

    def __init__(self, config: HarnessConfig, *, home: str, runtime_bin_dir: str, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.home = home.rstrip("/")
        self.runtime_bin_dir = runtime_bin_dir
        self.token = secrets.token_urlsafe(24)
        self.gateway: HarnessProcess | None = None
        self.gateway_log = bytearray()
        self._gateway_reader: asyncio.Task[None] | None = None

    @property
    def token_file(self) -> str:
        """Where the Gateway token is written for the bridge."""
        return f"{self.home}/.openclaw/gateway.token"

    def environment(self) -> dict[str, str]:
        """HOME, PATH with the Node 24 runtime first, no update checks or colours."""
        bin_dir = self.config.command[0].rpartition("/")[0]
        path = f"{self.runtime_bin_dir}:{bin_dir}:/usr/local/bin:/usr/bin:/bin"
        return {"HOME": self.home, "PATH": path, **QUIET_ENV, **self.config.env_vars}

    async def prepare(self) -> None:
        """Write the config and token file, start the Gateway and wait until it is ready."""
        if self.endpoint is None:
            raise ValueError("the openclaw harness needs a model endpoint (the proxy session)")
        config = render_config(
            base_url=self.endpoint.base_url,
            model=self.config.model or self.endpoint.model,
            api_key=self.endpoint.api_key,
            workspace=self.config.working_directory,
            token=self.token,
        )
        await self.launcher.write_file(f"{self.home}/.openclaw/openclaw.json", json.dumps(config).encode())
        await self.launcher.write_file(self.token_file, self.token.encode())
        argv = [self.config.command[0], "gateway", "run", "--port", str(GATEWAY_PORT), "--bind", "loopback"]
        self.gateway = await self.launcher.launch(
            argv, env=self.environment(), cwd=self.config.working_directory
        )
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            self.gateway.stdin.close()
        ready = asyncio.get_running_loop().create_future()
        self._gateway_reader = asyncio.create_task(self._read_gateway(self.gateway, ready))
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.config.startup_timeout_s)
        except TimeoutError:
            raise HarnessStartError(self._gateway_failure("did not report ready")) from None
        if not ready.result():
            raise HarnessStartError(self._gateway_failure(f"exited with code {self.gateway.returncode}"))

    def _gateway_failure(self, what: str) -> str:
        tail = ANSI.sub(b"", bytes(self.gateway_log[-1500:])).decode("utf-8", "replace")
        return f"harness 'openclaw': the gateway {what}; its output: {tail.strip() or '(none)'}"

    async def _read_gateway(self, process: HarnessProcess, ready: asyncio.Future[bool]) -> None:
        """Keep the Gateway's output (its last 64 KB) and resolve `ready` at its ready line or its exit."""

        async def pump(stream: asyncio.StreamReader) -> None:
            while line := await stream.readline():
                self.gateway_log += line
                del self.gateway_log[:-65536]
                if not ready.done() and READY.search(ANSI.sub(b"", line)):
                    ready.set_result(True)

        await asyncio.gather(pump(process.stdout), pump(process.stderr))
        if not ready.done():
            ready.set_result(False)

    def mcp_servers(self) -> list[Any]:
        """None: the bridge refuses per-session MCP servers (OpenClaw reads them from its own config)."""
        return []

    def launch_argv(self) -> list[str]:
        """The bridge, pointed at the Gateway with the token file."""
        url = f"ws://127.0.0.1:{GATEWAY_PORT}"
        return [self.config.command[0], "acp", "--url", url, "--token-file", self.token_file]

    async def stop(self) -> None:
        """Stop the bridge, then the Gateway and everything it started."""
        await super().stop()
        if self.gateway is not None:
            await self.gateway.kill()
        if self._gateway_reader is not None:
            self._gateway_reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._gateway_reader


def build(setup: HarnessSetup) -> OpenClawAdapter:
    """An OpenClaw adapter for a trial sandbox (`-a openclaw`); option `model` overrides the model name."""
    config = HarnessConfig(
        name="openclaw",
        command=[f"{setup.bin_dir}/openclaw"],
        working_directory=setup.workdir,
        session_timeout_s=setup.session_timeout_s,
        startup_timeout_s=300,  # the Gateway loads its plugins first: about 30 s on two busy cores
        model=setup.options.get("model"),
    )
    return OpenClawAdapter(
        config,
        home=setup.home,
        runtime_bin_dir=INSTALL.runtime_bin_dir or "",
        launcher=setup.launcher,
        endpoint=setup.endpoint,
        mcp=setup.mcp,
    )


DEFINITION = HarnessDefinition(
    name="openclaw",
    install=INSTALL,
    build=build,
    dialect="openai",
    description="OpenClaw over ACP (its Gateway and `openclaw acp` bridge on Node 24, chat completions)",
)
