"""Conformance: processes and lifecycle — kill, stop, limits, network modes, reset, spawn, binds, refusals."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
import pytest_asyncio

from evsys.records import Bind, ImageSpec, PodSpec
from evsys.sandbox.base import Capability, SandboxError, SandboxUnsupported
from evsys.sandbox.conformance.plugin import new_spec
from evsys.sandbox.conformance.test_exec import COUNT_SLEEPERS

pytestmark = pytest.mark.asyncio

# Whether a TCP connection to HOST:PORT succeeds from inside (bash's /dev/tcp; no tools needed).
CONNECT = "timeout 5 bash -c 'exec 3<>/dev/tcp/{host}/{port}' 2>/dev/null && echo connected || echo refused"
INTERFACES = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '"


async def test_kill_processes_kills_every_user_process_and_keeps_the_sandbox(sandbox):
    await sandbox.exec("setsid sleep 3600 > /dev/null 2>&1 < /dev/null &")
    await sandbox.exec("(sleep 3600 & sleep 3600 & wait) > /dev/null 2>&1 < /dev/null &", user="root")
    wait = f"for i in $(seq 200); do [ $({COUNT_SLEEPERS}) -ge 3 ] && break; sleep 0.05; done; "
    assert (await sandbox.exec(wait + COUNT_SLEEPERS, user="root")).stdout == "3\n"  # they are running
    killed = await sandbox.kill_processes()
    assert killed >= 3
    assert (await sandbox.exec(COUNT_SLEEPERS, user="root")).stdout == "0\n"
    assert (await sandbox.exec("echo alive")).stdout == "alive\n"


async def test_stop_is_idempotent_and_ends_the_sandbox(sandbox_backend, make_sandbox):
    box = await make_sandbox()
    assert (await box.exec("echo up")).stdout == "up\n"
    await box.stop()
    await box.stop()
    with pytest.raises(SandboxError):
        await box.exec("echo still-there")
    never_started = sandbox_backend(new_spec())
    await never_started.stop()


async def test_the_memory_limit_is_enforced_and_reported(sandbox_backend, make_sandbox):
    box = await make_sandbox(memory_mb=64)
    result = await box.exec("tail /dev/zero", timeout=60)  # tail keeps the endless 'line' in memory
    assert result.exit_code == 137 and not result.timed_out
    if sandbox_backend.supports(Capability.LIMITS):
        assert "memory" in result.limits_hit
    assert (await box.exec("echo alive")).stdout == "alive\n"


async def test_the_pids_limit_is_enforced_and_reported(sandbox_backend, make_sandbox):
    box = await make_sandbox(pids_max=32)
    forks = await box.exec("for i in $(seq 100); do sleep 5 & done 2>/dev/null; wait", timeout=30)
    await box.kill_processes()
    assert (await box.exec(COUNT_SLEEPERS.replace("sleep 3600", "sleep 5"), user="root")).stdout == "0\n"
    if sandbox_backend.supports(Capability.LIMITS):
        assert "pids" in forks.limits_hit
    assert (await box.exec("echo alive")).stdout == "alive\n"


@pytest_asyncio.fixture
async def host_server():
    """A TCP server on the host's loopback that answers every connection (the orchestrator's stand-in)."""
    connections: list[int] = []

    async def answer(reader, writer):
        connections.append(1)
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield port, connections
    server.close()
    await server.wait_closed()


async def _answered_from_host(port: int, connections: list[int]) -> bool:
    """Positive control: a connection from the host reaches the server (and its handler has run)."""

    def attempt() -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass

    before = len(connections)
    await asyncio.to_thread(attempt)
    for _ in range(1000):  # the handler runs on this event loop, soon after the connect returned
        if len(connections) > before:
            return True
        await asyncio.sleep(0.01)
    return False


async def test_no_network_has_only_loopback_and_reaches_nothing(sandbox, host_server):
    port, connections = host_server
    assert await _answered_from_host(port, connections)
    seen = len(connections)
    assert (await sandbox.exec(INTERFACES)).stdout.split() == ["lo"]
    for host in ("127.0.0.1", "10.0.2.2", "1.1.1.1"):
        attempt = await sandbox.exec(CONNECT.format(host=host, port=port))
        assert attempt.stdout == "refused\n", f"reached {host}:{port} from a no-network sandbox"
    assert len(connections) == seen


async def test_public_network_keeps_the_hosts_loopback_unreachable(
    sandbox_backend, make_sandbox, host_server
):
    if "public" not in sandbox_backend.network_modes:
        pytest.skip(f"{sandbox_backend.__name__} has no public networking")
    port, connections = host_server
    assert await _answered_from_host(port, connections)
    seen = len(connections)
    box = await make_sandbox(network="public")
    assert len((await box.exec(INTERFACES)).stdout.split()) >= 2  # more than loopback
    for host in ("127.0.0.1", "10.0.2.2"):
        attempt = await box.exec(CONNECT.format(host=host, port=port))
        assert attempt.stdout == "refused\n", f"reached the host's {host}:{port} from a public sandbox"
    assert len(connections) == seen


async def test_unsupported_network_modes_are_refused_at_creation(sandbox_backend):
    missing = {"no-network", "public", "allowlist"} - set(sandbox_backend.network_modes)
    if not missing:
        pytest.skip(f"{sandbox_backend.__name__} supports every network mode")
    for mode in sorted(missing):
        with pytest.raises(SandboxUnsupported, match="network"):
            sandbox_backend(new_spec(network=mode))


async def test_an_image_is_refused_unless_images_are_supported(sandbox_backend):
    if sandbox_backend.supports(Capability.IMAGES):
        pytest.skip("images are supported (the images suite checks them)")
    with pytest.raises(SandboxUnsupported, match="image"):
        sandbox_backend(new_spec(image=ImageSpec(ref="debian:bookworm-slim")))


async def test_reset_returns_to_the_started_state(sandbox_backend, make_sandbox):
    box = await make_sandbox()
    if not sandbox_backend.supports(Capability.RESET):
        with pytest.raises(SandboxUnsupported):
            await box.reset()
        return
    await box.exec("echo left > /app/left; echo tmp > /tmp/left; setsid sleep 3600 >/dev/null 2>&1 &")
    wait = f"for i in $(seq 200); do [ $({COUNT_SLEEPERS}) -ge 1 ] && break; sleep 0.05; done; "
    assert (await box.exec(wait + COUNT_SLEEPERS, user="root")).stdout == "1\n"  # running before the reset
    await box.reset()
    check = await box.exec("ls -A /app /tmp; " + COUNT_SLEEPERS, user="root")
    assert check.stdout.split() == ["/app:", "/tmp:", "0"]
    assert (await box.exec("pwd; id -u", user="root")).stdout == "/app\n0\n"


async def test_spawn_streams_input_and_output(sandbox_backend, sandbox):
    if not sandbox_backend.supports(Capability.SPAWN):
        with pytest.raises(SandboxUnsupported):
            await sandbox.spawn(["cat"])
        return
    process = await sandbox.spawn(["cat"])
    process.stdin.write(b"line one\n")
    await process.stdin.drain()
    assert await asyncio.wait_for(process.stdout.readline(), 30) == b"line one\n"
    process.stdin.close()
    assert await asyncio.wait_for(process.wait(), 30) == 0
    sleeper = await sandbox.spawn(["sleep", "3600"])
    await sleeper.kill()
    assert sleeper.returncode is not None and sleeper.returncode != 0


async def test_binds_are_mounted_read_only(sandbox_backend, make_sandbox, tmp_path: Path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "note.txt").write_text("from the host\n")
    bind = Bind(src=shared, dst="/mnt/shared")
    if not sandbox_backend.supports(Capability.BINDS):
        with pytest.raises(SandboxUnsupported, match="bind"):
            sandbox_backend(new_spec(binds=[bind]))
        return
    box = await make_sandbox(binds=[bind])
    assert (await box.exec("cat /mnt/shared/note.txt")).stdout == "from the host\n"
    write = await box.exec("echo x > /mnt/shared/new.txt && echo wrote", user="root")
    assert write.stdout == "" and not (shared / "new.txt").exists()


async def test_sandboxes_of_a_pod_share_one_network_and_know_each_others_names(sandbox_backend, make_sandbox):
    if not sandbox_backend.supports(Capability.PODS):
        pytest.skip("the backend has no pods (Capability.PODS)")
    pod = PodSpec(name=f"conformance-pod-{id(make_sandbox)}", hostname="first", hosts=["first", "second"])
    first = await make_sandbox(pod=pod)
    second = await make_sandbox(pod=pod.model_copy(update={"hostname": "second"}))
    outsider = await make_sandbox()
    namespace = "readlink /proc/self/ns/net"
    shared = (await first.exec(namespace)).stdout
    assert shared.startswith("net:") and (await second.exec(namespace)).stdout == shared
    assert (await outsider.exec(namespace)).stdout != shared  # the positive control: a namespace of its own
    for box in (first, second):
        lookup = "for name in first second; do getent hosts $name | cut -d' ' -f1; done"
        assert (await box.exec(lookup)).stdout.split() == ["127.0.0.1", "127.0.0.1"]
