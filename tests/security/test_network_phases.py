"""Red team: a sandbox's network narrowed between a trial's phases (Harbor's per-phase network policy)."""

from __future__ import annotations

import socket

import pytest
from redteam import CONNECT, host_address

from evsys.sandbox import SandboxUnsupported

pytestmark = pytest.mark.security


async def test_a_public_sandbox_narrowed_to_no_network_and_back(make_sandbox):
    address = host_address()
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address to serve from")
    sb = await make_sandbox(network="public")
    server = socket.create_server(("0.0.0.0", 0))
    connect = CONNECT.format(host=address, port=server.getsockname()[1])
    try:
        assert (await sb.exec(connect)).stdout.split() == ["CONNECTED"]  # the attempt can succeed
        await sb.set_network("no-network")
        assert (await sb.exec(connect, user="root")).stdout.split()[0] == "ERR"
        # root in the sandbox cannot lift the filter (no CAP_NET_ADMIN), and the attempt still fails
        lift = await sb.exec("nft flush ruleset 2>&1; echo rc=$?", user="root")
        assert "rc=0" not in lift.stdout
        assert (await sb.exec(connect, user="root")).stdout.split()[0] == "ERR"
        await sb.set_network("public")
        assert (await sb.exec(connect)).stdout.split() == ["CONNECTED"]
    finally:
        server.close()


async def test_a_sandbox_started_without_network_cannot_be_given_one(sandbox):
    await sandbox.set_network("no-network")
    with pytest.raises(SandboxUnsupported, match="started without network"):
        await sandbox.set_network("public")
