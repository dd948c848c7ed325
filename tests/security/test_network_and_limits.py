"""Red team: networking and resource limits."""

from __future__ import annotations

import os
import socket
import threading

import pytest
from redteam import CONNECT, host_address

from evsys.sandbox import SandboxError

pytestmark = pytest.mark.security


async def test_cannot_reach_a_server_on_host_loopback(sandbox):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    accepted: list = []
    server.settimeout(3)
    t = threading.Thread(target=lambda: _accept(server, accepted))
    t.start()
    # positive control: the same port on the sandbox's own loopback accepts once something listens there
    server_py = f'import socket, time; s = socket.create_server(("127.0.0.1", {port})); time.sleep(5)'
    listen_inside = f"python3 -c '{server_py}'"
    try:
        r = await sandbox.exec(
            CONNECT.format(host="127.0.0.1", port=port)
            + f"; {listen_inside} & sleep 0.5; "
            + CONNECT.format(host="127.0.0.1", port=port)
            + "; kill %1",
            user="root",
        )
        assert r.stdout.split() == ["ERR", "111", "CONNECTED"], r.stdout + r.stderr
    finally:
        t.join()
        server.close()
    assert accepted == []


def _accept(server: socket.socket, accepted: list) -> None:
    try:
        accepted.append(server.accept())
    except OSError:
        pass


async def test_public_network_reaches_out_but_not_the_host_loopback(make_sandbox):
    sb = await make_sandbox(network="public")
    loopback = socket.socket()
    loopback.bind(("127.0.0.1", 0))
    loopback.listen()
    port = loopback.getsockname()[1]
    try:
        for host in ("10.0.2.2", "127.0.0.1"):  # slirp's gateway (the host with loopback disabled), own lo
            r = await sb.exec(CONNECT.format(host=host, port=port), user="root")
            assert r.stdout.split()[:1] == ["ERR"], host  # the connect ran, and failed
        address = host_address()
        if address is not None:  # outbound NAT works: a server on the host's own address answers
            public = socket.create_server(("0.0.0.0", 0))
            try:
                r = await sb.exec(CONNECT.format(host=address, port=public.getsockname()[1]))
                assert r.stdout.split() == ["CONNECTED"]
            finally:
                public.close()
    finally:
        loopback.close()
        await sb.stop()


async def test_allowlist_network_reaches_only_the_allowed_hosts(make_sandbox):
    address = host_address()
    if address is None:
        pytest.skip("this host has no non-loopback address to serve from")
    server = socket.create_server(("0.0.0.0", 0))
    port = server.getsockname()[1]
    boxes = []
    try:
        allowed = await make_sandbox(network="allowlist", allowed_hosts=[address])
        boxes.append(allowed)
        other = await make_sandbox(network="allowlist", allowed_hosts=["192.0.2.254"])  # not this host
        boxes.append(other)
        r = await allowed.exec(CONNECT.format(host=address, port=port))
        assert r.stdout.split() == ["CONNECTED"]
        r = await other.exec(CONNECT.format(host=address, port=port))
        assert r.stdout.split()[0] == "ERR"  # rejected by the filter, at once
        for sb in (allowed, other):  # the host's loopback stays out of reach
            r = await sb.exec(CONNECT.format(host="10.0.2.2", port=port), user="root")
            assert r.stdout.split()[:1] == ["ERR"]
        tamper = await other.exec("nft flush ruleset", user="root")
        assert tamper.exit_code != 0  # no CAP_NET_ADMIN inside: the filter stays
        r = await other.exec(CONNECT.format(host=address, port=port))
        assert r.stdout.split()[0] == "ERR"
    finally:
        server.close()
        for sb in boxes:
            await sb.stop()


async def test_allowed_names_are_pinned_to_the_addresses_the_filter_allows(make_sandbox):
    try:
        expected = sorted({i[4][0] for i in socket.getaddrinfo("pypi.org", None, type=socket.SOCK_STREAM)})
    except OSError:
        pytest.skip("pypi.org does not resolve on this host")
    sb = await make_sandbox(network="allowlist", allowed_hosts=["pypi.org"])
    try:
        r = await sb.exec("awk '$2 == \"pypi.org\" {print $1}' /etc/hosts | sort -u")
        assert sorted(set(r.stdout.split())) == expected  # files come before DNS (nsswitch)
    finally:
        await sb.stop()


async def test_bad_allowed_hosts_are_refused_naming_the_entry(make_sandbox):
    for entry, message in (("*.github.com", "wildcards"), ("no-such-host.invalid", "cannot resolve")):
        with pytest.raises(SandboxError, match=message) as raised:
            await make_sandbox(network="allowlist", allowed_hosts=[entry])
        assert entry in str(raised.value)


async def test_no_route_to_any_other_address(sandbox):
    r = await sandbox.exec("ip route get 1.1.1.1 2>&1; ip -o link | cut -d: -f2", user="root")
    assert "unreachable" in r.stdout.lower()
    assert r.stdout.split()[-1] == "lo"
    c = await sandbox.exec(CONNECT.format(host="10.255.255.1", port=80))
    assert c.stdout.split() == ["ERR", "101"]  # ENETUNREACH before any packet leaves


async def test_fork_bomb_is_contained_and_recorded(make_sandbox):
    sb = await make_sandbox(pids_max=64)
    r = await sb.exec("bomb() { bomb | bomb & }; bomb; sleep 2", timeout=10)
    assert "pids" in r.limits_hit
    await sb.kill_processes()
    assert (await sb.exec("echo still-usable")).stdout == "still-usable\n"
    await sb.stop()


async def test_memory_bomb_is_oom_killed_and_recorded(make_sandbox):
    sb = await make_sandbox(memory_mb=64)
    r = await sb.exec("python3 -c 'x = bytearray(512 * 1024 * 1024); print(len(x))'", timeout=30)
    assert r.exit_code == 137
    assert "memory" in r.limits_hit
    assert (await sb.exec("echo alive")).stdout == "alive\n"
    await sb.stop()


async def test_disk_fill_stops_at_storage_limit(make_sandbox):
    sb = await make_sandbox(storage_mb=32)
    r = await sb.exec("dd if=/dev/zero of=/app/fill bs=1M count=100 2>&1; du -m /app/fill", timeout=30)
    assert "No space left on device" in r.stdout
    assert "storage" in r.limits_hit
    assert int(r.stdout.split()[-2]) <= 32
    full = await sb.exec("head -c 1000000 /dev/zero > /app/more; echo still-runs")
    assert full.stdout == "still-runs\n" and "storage" in full.limits_hit  # commands still run when full
    await sb.exec("rm /app/fill /app/more")
    assert "storage" not in (await sb.exec("echo ok > /app/small")).limits_hit
    await sb.stop()


# root in the sandbox aims at the daemon's cgroup files (the only handles on the machinery's cgroups inside)
# and at a cgroup mount of its own, then reports where it is
LEAVE_THE_AGENTS_CGROUPS = """for fd in 200 201 202 203; do
  (echo 0 > /proc/1/fd/$fd) 2>/dev/null && echo joined-$fd
done
mkdir -p /tmp/cg && mount -t cgroup -o pids none /tmp/cg 2>/dev/null && echo mounted
echo tried; grep -E ':(pids|memory):' /proc/self/cgroup"""


async def test_root_in_the_sandbox_cannot_leave_the_agents_cgroups(make_sandbox):
    sb = await make_sandbox(pids_max=64, memory_mb=128)
    daemon = sb._daemon_pid()
    # positive control: the files the attack aims at are there, held by the daemon (its children's scopes)
    held = [os.readlink(f"/proc/{daemon}/fd/{fd}") for fd in (200, 201, 202, 203)]
    assert [path.rsplit("/", 2)[-2] for path in held] == ["agent", "agent", "verifier", "verifier"]
    r = await sb.exec(LEAVE_THE_AGENTS_CGROUPS, user="root")
    lines = r.stdout.splitlines()
    assert lines[0] == "tried", r.stdout + r.stderr  # it ran, and nothing joined or mounted
    assert sorted(line.split(":", 1)[1] for line in lines[1:]) == ["memory:/../agent", "pids:/../agent"]
