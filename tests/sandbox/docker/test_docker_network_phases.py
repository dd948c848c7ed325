"""The docker backend switches a running container's network between a trial's phases."""

from __future__ import annotations

import pytest

from evsys.records import SandboxSpec
from evsys.sandbox.base import Capability, SandboxUnsupported
from evsys.sandbox.docker import DockerSandbox

pytestmark = pytest.mark.usefixtures("docker_env")

INTERFACES = "ls /sys/class/net"


async def test_a_public_container_is_narrowed_to_no_network_and_back():
    assert DockerSandbox.supports(Capability.SWITCH_NETWORK)
    async with DockerSandbox(SandboxSpec(name="dk-switch", network="public")) as sb:
        assert "eth0" in (await sb.exec(INTERFACES)).stdout.split()
        await sb.set_network("no-network")
        assert (await sb.exec(INTERFACES)).stdout.split() == ["lo"]
        await sb.set_network("public")  # connected again (the interface may get a new name)
        assert len((await sb.exec(INTERFACES)).stdout.split()) == 2


async def test_a_container_started_without_network_cannot_be_given_one():
    async with DockerSandbox(SandboxSpec(name="dk-nonet-switch")) as sb:
        await sb.set_network("no-network")
        with pytest.raises(SandboxUnsupported, match="started without network"):
            await sb.set_network("public")
