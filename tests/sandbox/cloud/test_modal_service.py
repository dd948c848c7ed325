"""The Modal backend against the real Modal service: runs only when MODAL_TOKEN_ID and MODAL_TOKEN_SECRET
are set (the SDK's own variables choose the service: MODAL_SERVER_URL, MODAL_ENVIRONMENT; $EVSYS_MODAL_APP
the app, default `evsys`; $EVSYS_MODAL_BASE_IMAGE the image, default `debian:bookworm-slim`); costs a cent
or so."""

from __future__ import annotations

import os

import pytest
from standins import environment, real_service_environment

from evsys.records import SandboxSpec

# Read at import, before the session's stand-in fixtures point the SDK's variables at the stand-in.
REAL = real_service_environment(
    "MODAL_TOKEN_ID",
    "MODAL_TOKEN_SECRET",
    "MODAL_SERVER_URL",
    "MODAL_ENVIRONMENT",
    "EVSYS_MODAL_APP",
    "EVSYS_MODAL_BASE_IMAGE",
)

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.slow,
    pytest.mark.skipif(
        not (REAL["MODAL_TOKEN_ID"] and REAL["MODAL_TOKEN_SECRET"]),
        reason="MODAL_TOKEN_ID/MODAL_TOKEN_SECRET are not set: the real Modal service is not checked",
    ),
]


async def test_a_real_modal_sandbox_runs_commands_and_moves_files(tmp_path):
    modal = pytest.importorskip("modal", reason="the modal extra is not installed")
    (tmp_path / "in.txt").write_text("from the host\n")
    with environment(**REAL):
        modal.Client._set_env_client(None)  # a client made for a stand-in must not be reused
        try:
            await _check(tmp_path)
        finally:
            modal.Client._set_env_client(None)


async def _check(tmp_path):
    """A command with stdin and exit code, a timeout, a file both ways, no network."""
    from evsys.sandbox.modal.sandbox import ModalSandbox

    async with ModalSandbox(SandboxSpec(name=f"evsys-service-check-{os.getpid()}")) as box:
        result = await box.exec("id -un; cat; echo err >&2; exit 7", stdin=b"piped\n")
        assert (result.stdout, result.stderr, result.exit_code) == ("agent\npiped\n", "err\n", 7)
        slow = await box.exec("sleep 600", timeout=2)
        assert slow.timed_out
        await box.upload(tmp_path / "in.txt", "/app/in.txt")
        await box.download("/app/in.txt", tmp_path / "back.txt")
        assert (tmp_path / "back.txt").read_text() == "from the host\n"
        net = await box.exec(
            "timeout 5 bash -c 'exec 3<>/dev/tcp/1.1.1.1/80' && echo reached || echo blocked"
        )
        assert net.stdout == "blocked\n"
