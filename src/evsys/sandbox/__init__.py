"""Sandboxes: where agent code runs. `Sandbox` is the base class every backend implements (base.py); backends
are found by name through the registry (`create_sandbox(spec, backend)`, registry.py); `local/` is the
built-in backend; `pool.py` keeps started sandboxes for reuse between trials."""

from __future__ import annotations

from evsys.sandbox.base import (
    AGENT_LOGS_DIR,
    ARTIFACTS_DIR,
    LOGS_DIR,
    SOLUTION_DIR,
    TESTS_DIR,
    VERIFIER_LOGS_DIR,
    Capability,
    Sandbox,
    SandboxError,
    SandboxUnsupported,
    ShellSession,
    StreamingProcess,
)
from evsys.sandbox.local.sandbox import LocalSandbox
from evsys.sandbox.registry import (
    ENTRY_POINT_GROUP,
    UnknownSandboxBackend,
    check_backend,
    create_sandbox,
    register_sandbox,
    sandbox_backends,
    sandbox_class,
    unregister_sandbox,
)

__all__ = [
    "AGENT_LOGS_DIR",
    "ARTIFACTS_DIR",
    "ENTRY_POINT_GROUP",
    "LOGS_DIR",
    "SOLUTION_DIR",
    "TESTS_DIR",
    "VERIFIER_LOGS_DIR",
    "Capability",
    "LocalSandbox",
    "Sandbox",
    "SandboxError",
    "SandboxUnsupported",
    "ShellSession",
    "StreamingProcess",
    "UnknownSandboxBackend",
    "check_backend",
    "create_sandbox",
    "register_sandbox",
    "sandbox_backends",
    "sandbox_class",
    "unregister_sandbox",
]
