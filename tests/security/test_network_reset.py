"""Red team: a sandbox with network access (public, allowlist) that the pool hands to the next trial has a
fresh network. Trial 1, as root, leaves a connection to a server on the host held open by a background
process, a listening socket, and a closed connection (lingering: FIN-WAIT, TIME-WAIT); its sandbox goes
back to the pool, reset, and the next trial gets it: nothing of that is left in its network namespace, the
server sees trial 1's connection closed, and the network works (it connects to the same server). The
positive control hands the sandbox over with the reset skipped: the next trial then finds all of it. A trial
whose phase switched the network (no-network for its verifier) leaves the next one the spec's own network. And
after a hostile trial, the reused sandbox's fingerprint (sandbox_fingerprint.py) is the fresh one's."""

from __future__ import annotations

import socket

import pytest
from redteam import CONNECT, host_address, redteam_spec
from sandbox_fingerprint import CHANGED_BY_HOSTILE, HOSTILE_AGENT, HOSTILE_ROOT, differences, fingerprint

from evsys.sandbox.pool import SandboxPool

pytestmark = pytest.mark.security

LEAVE = (
    "nohup python3 -c \"import socket, time; s = socket.create_server(('0.0.0.0', 9000)); "
    "c = socket.create_connection(('{host}', {port})); c.sendall(b'trial-1'); time.sleep(1000)\" "
    ">/dev/null 2>&1 & "
    "python3 -c \"import socket; socket.create_connection(('{host}', {port})).close()\"; "
    "for i in $(seq 200); do ss -Htan | grep -q ESTAB && break; sleep 0.05; done; ss -Htan"
)


async def _skipped() -> None:
    """A reset that does nothing (the positive control's handover)."""


@pytest.fixture
def server():
    address = host_address()
    if address is None:
        pytest.skip("this host has no non-loopback address to serve from")
    listening = socket.create_server(("0.0.0.0", 0))
    listening.settimeout(10)
    yield address, listening
    listening.close()


def _held_connection(listening: socket.socket) -> socket.socket:
    """The server's end of trial 1's connection that stays open (the one that said `trial-1`)."""
    for _ in range(2):
        conn, _ = listening.accept()
        conn.settimeout(10)
        if conn.recv(16) == b"trial-1":
            return conn
        conn.close()
    raise AssertionError("trial 1's held connection never reached the server")


@pytest.mark.parametrize(
    ("network", "reset"), [("public", True), ("allowlist", True), ("public", False)], ids=str
)
async def test_the_next_trial_gets_a_fresh_network(server, network, reset):
    address, listening = server
    port = listening.getsockname()[1]
    allowed = [address] if network == "allowlist" else []
    pool = SandboxPool.for_backend("local", max_idle=1)
    spec = redteam_spec(network=network, allowed_hosts=allowed)
    try:
        lease1 = await pool.acquire(spec)
        first = lease1.sandbox
        left = await first.exec(LEAVE.format(host=address, port=port), user="root")
        # the attack ran: a listener, a held connection to the server, a closed one lingering
        assert "LISTEN" in left.stdout and "ESTAB" in left.stdout and "-WAIT" in left.stdout, left.stdout
        held = _held_connection(listening)
        if not reset:
            first.reset = _skipped  # type: ignore[method-assign]
        await lease1.release()
        lease2 = await pool.acquire(spec.model_copy(update={"name": f"{spec.name}-next"}))
        second = lease2.sandbox
        try:
            assert second is first and lease2.reused
            await _check_next_trial(second, address, port, held, reset=reset)
        finally:
            await lease2.release(reusable=False)
    finally:
        await pool.close()


async def _check_next_trial(second, address: str, port: int, held: socket.socket, *, reset: bool) -> None:
    sockets = (await second.exec("ss -Htan", user="root")).stdout
    listener = await second.exec(CONNECT.format(host="127.0.0.1", port=9000))
    if not reset:  # positive control: without the reset the next trial finds trial 1's network
        assert f"{address}:{port}" in sockets and "LISTEN" in sockets
        assert listener.stdout.split() == ["CONNECTED"]
        return
    assert sockets == ""
    assert listener.stdout.split() == ["ERR", "111"]  # refused: nobody listens
    try:
        assert held.recv(16) == b""  # the server sees trial 1's connection closed
    except ConnectionResetError:
        pass
    works = await second.exec(CONNECT.format(host=address, port=port))
    assert works.stdout.split() == ["CONNECTED"]  # the next trial's network works


@pytest.mark.parametrize("network", ["public", "allowlist"])
async def test_after_a_hostile_trial_the_reused_sandbox_is_a_fresh_ones(server, network):
    address, _ = server
    pool = SandboxPool.for_backend("local", max_idle=1)
    spec = redteam_spec(network=network, allowed_hosts=[address] if network == "allowlist" else [])
    try:
        lease1 = await pool.acquire(spec)
        first = lease1.sandbox
        fresh = await fingerprint(first)
        await first.exec(HOSTILE_ROOT, user="root")
        await first.exec(HOSTILE_AGENT, user="agent")
        changed = differences(fresh, await fingerprint(first))
        assert set(changed) == CHANGED_BY_HOSTILE, changed  # positive control: the network part among them
        await lease1.release()
        lease2 = await pool.acquire(spec.model_copy(update={"name": f"{spec.name}-next"}))
        second = lease2.sandbox
        try:
            assert second is first and lease2.reused
            assert differences(fresh, await fingerprint(second)) == {}
        finally:
            await lease2.release(reusable=False)
    finally:
        await pool.close()


@pytest.mark.parametrize("network", ["public", "allowlist"])
async def test_a_phase_that_switched_the_network_off_leaves_the_next_trial_the_specs_own(server, network):
    address, listening = server
    probe = CONNECT.format(host=address, port=listening.getsockname()[1])
    pool = SandboxPool.for_backend("local", max_idle=1)
    spec = redteam_spec(network=network, allowed_hosts=[address] if network == "allowlist" else [])
    try:
        lease1 = await pool.acquire(spec)
        first = lease1.sandbox
        await first.set_network("no-network")
        assert (await first.exec(probe)).stdout.split()[:1] == ["ERR"]  # positive control: switched off
        await lease1.release()
        lease2 = await pool.acquire(spec.model_copy(update={"name": f"{spec.name}-next"}))
        second = lease2.sandbox
        try:
            assert second is first and lease2.reused
            assert (await second.exec(probe)).stdout.split() == ["CONNECTED"]
        finally:
            await lease2.release(reusable=False)
    finally:
        await pool.close()
