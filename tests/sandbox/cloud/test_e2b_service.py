"""The E2B backend against the real E2B service: runs only when E2B_API_KEY is set (the SDK's own variables
choose the service: E2B_DOMAIN; $EVSYS_E2B_TEMPLATE the template, default `base`); costs a cent or so."""

from __future__ import annotations

import os

import pytest
from standins import environment, real_service_environment

from evsys.records import ImageSpec, SandboxSpec

# Read at import, before the session's stand-in fixtures point the SDK's variables at the stand-in.
REAL = real_service_environment(
    "E2B_API_KEY", "E2B_DOMAIN", "E2B_API_URL", "E2B_SANDBOX_URL", "EVSYS_E2B_TEMPLATE"
)

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.slow,
    pytest.mark.skipif(
        not REAL["E2B_API_KEY"],
        reason="E2B_API_KEY is not set: the real E2B service is not checked",
    ),
]


async def test_a_real_e2b_sandbox_runs_commands_and_moves_files(tmp_path):
    pytest.importorskip("e2b", reason="the e2b extra is not installed")
    (tmp_path / "in.txt").write_text("from the host\n")
    with environment(**REAL):
        await _check(tmp_path)


async def _check(tmp_path):
    """A command with stdin and exit code, a timeout, a file both ways, no network."""
    from evsys.sandbox.e2b.sandbox import E2BSandbox

    async with E2BSandbox(SandboxSpec(name=f"evsys-service-check-{os.getpid()}")) as box:
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


async def test_a_real_e2b_sandbox_runs_on_a_dockerfile_the_service_builds(tmp_path):
    pytest.importorskip("e2b", reason="the e2b extra is not installed")
    from evsys.sandbox.e2b.sandbox import E2BSandbox

    context = tmp_path / "environment"
    context.mkdir()
    (context / "seed.txt").write_text("copied\n")
    lines = [
        "FROM debian:bookworm-slim",
        "COPY seed.txt /opt/seed/",
        "RUN cp /opt/seed/seed.txt /opt/ran.txt",
    ]
    (context / "Dockerfile").write_text("\n".join(lines) + "\n")
    image = ImageSpec(ref="check (environment/Dockerfile)", dockerfile=context / "Dockerfile")
    with environment(**REAL):
        async with E2BSandbox(SandboxSpec(name=f"evsys-service-image-{os.getpid()}", image=image)) as box:
            assert (await box.exec("cat /opt/ran.txt")).stdout == "copied\n"
