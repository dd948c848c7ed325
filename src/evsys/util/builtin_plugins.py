"""evsys's own plug-ins, by entry-point group: the one place they are declared.

Every `Registry` (evsys.util.registry) starts with the entries of its group here, as lazy `module:attribute`
paths (naming one imports nothing but its module, on first use), and shell completion (evsys.cli.complete)
lists them without importing any registry. Third-party packages declare theirs as entry points in the same
groups; evsys's pyproject.toml declares none of its own (tests/util/test_builtin_plugins.py checks both).
Model providers and verifier functions are registered in code (evsys.model.providers, evsys.verify), not
here.
"""

from __future__ import annotations

BUILTIN_PLUGINS: dict[str, dict[str, str]] = {
    "evsys.sandboxes": {
        "local": "evsys.sandbox.local.sandbox:LocalSandbox",
        "docker": "evsys.sandbox.docker.sandbox:DockerSandbox",
        "daytona": "evsys.sandbox.daytona.sandbox:DaytonaSandbox",
        "e2b": "evsys.sandbox.e2b.sandbox:E2BSandbox",
        "modal": "evsys.sandbox.modal.sandbox:ModalSandbox",
    },
    "evsys.agents": {
        "oracle": "evsys.agent.oracle:OracleAgent",
        "nop": "evsys.agent.nop:NopAgent",
        "loop": "evsys.agent.loop:LoopAgent",
    },
    "evsys.harnesses": {
        "claude-code": "evsys.agent.harness.claude_code:DEFINITION",
        "codex": "evsys.agent.harness.codex:DEFINITION",
        "mini-swe-agent": "evsys.agent.harness.mini_swe_agent:DEFINITION",
        "gemini-cli": "evsys.agent.harness.gemini_cli:DEFINITION",
        "opencode": "evsys.agent.harness.opencode:DEFINITION",
        "openclaw": "evsys.agent.harness.openclaw:DEFINITION",
    },
    "evsys.executors": {
        "local": "evsys.engine.executors.local:LocalExecutor",
        "ray": "evsys.engine.executors.ray:RayExecutor",  # imports Ray only when one is made
        "processes": "evsys.engine.executors.processes:ProcessExecutor",
    },
}


def builtin_plugins(group: str) -> dict[str, str]:
    """evsys's own plug-ins of entry-point `group`: name -> `module:attribute` (empty for other groups)."""
    return dict(BUILTIN_PLUGINS.get(group, {}))
