"""The conformance suite over every registered backend, plus the local backend seen through the `Sandbox`
base class's defaults only (registered for this directory's tests)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conformance_backends import ExecDefaultsSandbox

from evsys.sandbox import register_sandbox, sandbox_backends, unregister_sandbox
from evsys.sandbox.conformance.plugin import make_sandbox, sandbox, sandbox_backend

sys.path.insert(0, str(Path(__file__).parent.parent / "cloud"))
from standins import daytona_standin, e2b_standin, modal_standin

__all__ = ["daytona_standin", "e2b_standin", "make_sandbox", "modal_standin", "sandbox", "sandbox_backend"]
# The cloud backends are checked against their stand-in services (tests/sandbox/cloud).
STANDINS = {"daytona": "daytona_standin", "e2b": "e2b_standin", "modal": "modal_standin"}

EXEC_DEFAULTS = "local-exec-defaults"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every registered backend, and the exec-defaults view of the local one."""
    if "sandbox_backend_name" in metafunc.fixturenames:
        names = [*sandbox_backends(), EXEC_DEFAULTS]
        metafunc.parametrize("sandbox_backend_name", names, ids=names, scope="session")


@pytest.fixture(scope="session", autouse=True)
def docker_daemon_for_docker(request: pytest.FixtureRequest, sandbox_backend_name: str) -> None:
    """The docker backend is checked against the session's private dockerd (tests/dockerd_fixtures.py)."""
    if sandbox_backend_name == "docker":
        request.getfixturevalue("docker_session")
    if sandbox_backend_name in STANDINS:
        request.getfixturevalue(STANDINS[sandbox_backend_name])


@pytest.fixture(scope="session", autouse=True)
def exec_defaults_backend():
    """`local-exec-defaults`, registered for the session (the backend fixtures are session-scoped too, so a
    module-scoped registration could end before the last test that uses the backend)."""
    register_sandbox(EXEC_DEFAULTS, ExecDefaultsSandbox, replace=True)
    yield
    unregister_sandbox(EXEC_DEFAULTS)
