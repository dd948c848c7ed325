"""The local sandbox on an image's layers: the image's files (whiteouts included) and config, evsys's own
machinery (agent user, /logs, exec daemon), and reset, all without the host's /usr."""

from __future__ import annotations

import asyncio
import itertools
import os
from pathlib import Path

import pytest

from evsys.images import BuildContext, ImageService
from evsys.records import ImageSpec, SandboxSpec
from evsys.sandbox import LocalSandbox

pytestmark = pytest.mark.timeout(1800)
_names = itertools.count()

DOCKERFILE = """\
FROM debian:bookworm-slim
RUN echo from-the-image > /etc/evsys-image-marker && rm /usr/bin/yes
RUN mkdir -p /opt/tool/bin && printf '#!/bin/sh\\necho tool-ran\\n' > /opt/tool/bin/mytool \\
    && chmod +x /opt/tool/bin/mytool
ENV PATH="/opt/tool/bin:${PATH}" GREETING=hello
WORKDIR /work
"""


@pytest.fixture(scope="module")
def sandbox_image(image_storage, tmp_path_factory) -> ImageSpec:
    context = tmp_path_factory.mktemp("ctx")
    (context / "Dockerfile").write_text(DOCKERFILE)
    service = ImageService(image_storage, pull_policy="never")
    result = asyncio.run(service.build(BuildContext(context / "Dockerfile", context), name="sandbox-image"))
    return result.spec


def _spec(image: ImageSpec, **kw) -> SandboxSpec:
    return SandboxSpec(name=f"img-{os.getpid()}-{next(_names)}", image=image, workdir="/work", **kw)


def _on_host(*paths: str) -> bool:
    return all(os.path.exists(p) for p in paths)


async def test_the_sandbox_runs_the_images_userland_not_the_hosts(sandbox_image):
    assert _on_host("/usr/bin/yes", "/usr/bin/bwrap")
    async with LocalSandbox(_spec(sandbox_image)) as sb:
        marker = await sb.exec("cat /etc/evsys-image-marker")
        assert marker.stdout == "from-the-image\n"
        # deleted by a RUN step (an overlay whiteout in the image's layer) and absent from the image
        gone = await sb.exec("ls /usr/bin/yes /usr/bin/bwrap")
        assert gone.exit_code != 0 and "yes" in gone.stderr and "bwrap" in gone.stderr
        assert (await sb.exec("cat /etc/debian_version")).stdout.startswith("12.")


async def test_the_image_config_applies(sandbox_image):
    async with LocalSandbox(_spec(sandbox_image, env={"EXTRA": "${PATH}:/x"})) as sb:
        result = await sb.exec('mytool; echo "$GREETING"; pwd; echo "$PATH"; echo "$EXTRA"')
        lines = result.stdout.splitlines()
        assert lines[:3] == ["tool-ran", "hello", "/work"]
        assert lines[3].startswith("/opt/tool/bin:") and lines[4] == lines[3] + ":/x"


async def test_evsys_users_and_logs_exist_on_an_image(sandbox_image):
    async with LocalSandbox(_spec(sandbox_image)) as sb:
        who = await sb.exec("id -un; id -u; ls -ld /logs/agent /logs/verifier | awk '{print $3}'")
        assert who.stdout.split() == ["agent", str(sb.agent_uid), "agent", "root"]
        assert (await sb.exec("id -un", user="root")).stdout == "root\n"
        assert (await sb.exec("getent hosts localhost")).exit_code == 0


async def test_reset_rebuilds_the_root_on_the_image_layers(sandbox_image, tmp_path):
    async with LocalSandbox(_spec(sandbox_image)) as sb:
        await sb.exec("echo scribble > /etc/evsys-image-marker && echo t > /tmp/t", user="root")
        await sb.reset()
        after = await sb.exec("cat /etc/evsys-image-marker; ls /tmp")
        assert after.stdout == "from-the-image\n"
    layers = [Path(layer) / "etc/evsys-image-marker" for layer in sandbox_image.rootfs_layers]
    assert [m.read_text() for m in layers if m.exists()] == ["from-the-image\n"]  # the layers stay as built
