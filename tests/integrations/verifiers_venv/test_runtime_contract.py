"""`EvsysRuntime` against the behaviours verifiers' `Runtime` ABC and its runtimes document, one by one.

verifiers' wheel ships no runtime test suite, so each documented behaviour of `verifiers.v1.runtimes.base`
(and of the `subprocess`/`container` runtimes where the base leaves it open) is checked here on a real
sandbox. Runs in `.venv-verifiers` (see conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from verifiers.v1.errors import SandboxError
from verifiers.v1.runtimes import SubprocessConfig, make_runtime

from evsys.integrations.verifiers import EvsysConfig, EvsysRuntime

FETCH = (
    "import sys, urllib.request\n"
    "try:\n"
    "    print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())\n"
    "except OSError as exc:\n"
    "    print('unreachable', exc); sys.exit(3)\n"
)


@pytest.fixture
async def runtime() -> AsyncIterator[EvsysRuntime]:
    box = EvsysRuntime(EvsysConfig())
    await box.start()
    try:
        yield box
    finally:
        await box.stop()


@contextlib.asynccontextmanager
async def http_server(host: str, body: bytes) -> AsyncIterator[int]:
    """A one-line HTTP server on the host; yields its port."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, host, 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def fetch(box: EvsysRuntime, url: str) -> tuple[int, str]:
    result = await box.run(["/usr/bin/python3", "-c", FETCH, url], {})
    return result.exit_code, result.stdout.strip()


async def test_run_reports_exit_code_output_and_merged_environment(runtime: EvsysRuntime) -> None:
    runtime.env = {"A": "task", "B": "task"}
    result = await runtime.run(["sh", "-c", 'echo "$A $B $PWD"; echo oops >&2; exit 7'], {"B": "call"})
    assert (result.exit_code, result.stdout, result.stderr) == (7, "task call /app\n", "oops\n")
    assert (await runtime.run_program(["echo", "main program"], {})).stdout == "main program\n"


async def test_write_then_read_round_trips_bytes_with_bounded_reads(runtime: EvsysRuntime) -> None:
    data = bytes(range(256)) * 40
    await runtime.write("nested/dir/blob.bin", data)
    assert await runtime.read("nested/dir/blob.bin") == data
    assert await runtime.read("/app/nested/dir/blob.bin", max_bytes=len(data)) == data  # exact fit
    with pytest.raises(SandboxError, match="limit"):
        await runtime.read("nested/dir/blob.bin", max_bytes=len(data) - 1)
    with pytest.raises(SandboxError):
        await runtime.read("no/such/file")


async def test_views_share_one_box_with_their_own_env_and_user(runtime: EvsysRuntime) -> None:
    view = runtime.with_env({"X": "view"})
    await view.write("from-view.txt", b"shared")
    assert await runtime.read("from-view.txt") == b"shared"
    assert (await view.run(["sh", "-c", "echo $X"], {})).stdout == "view\n"
    assert (await runtime.run(["sh", "-c", "echo $X"], {})).stdout == "\n"

    agent = runtime.with_user("agent", "/home/agent")
    who = await agent.run(["sh", "-c", "id -un; echo $HOME"], {})
    assert who.stdout.split() == ["agent", "/home/agent"]
    root_write = await runtime.run(["sh", "-c", "echo x > /etc/owned-by-root"], {})
    assert root_write.exit_code == 0  # positive control: the default user (root) can
    assert (await agent.run(["sh", "-c", "echo x > /etc/agent-was-here"], {})).exit_code != 0
    with pytest.raises(SandboxError, match="user"):
        await runtime.with_user("nobody").run(["true"], {})


async def test_live_process_streams_and_dies_with_its_children(runtime: EvsysRuntime) -> None:
    process = await runtime.open_process(["sh", "-c", "sleep 300 & echo child=$!; cat"], {})
    first = await anext(process.stdout)
    child = first.decode().strip().removeprefix("child=")
    await process.write(b"ping\n")
    assert await anext(process.stdout) == b"ping\n"
    assert await process.poll() is None
    assert (await runtime.run(["kill", "-0", child], {})).exit_code == 0  # the child runs
    await process.terminate()
    assert await process.wait() != 0
    assert await process.poll() is not None
    assert (await runtime.run(["kill", "-0", child], {})).exit_code != 0


async def test_cancelling_run_kills_the_process_tree(runtime: EvsysRuntime) -> None:
    run = asyncio.ensure_future(
        runtime.run(["sh", "-c", "sleep 300 & echo $! > /tmp/child; exec sleep 301"], {})
    )
    await runtime.run(["sh", "-c", "until [ -s /tmp/child ]; do sleep 0.05; done"], {})
    child = (await runtime.read("/tmp/child")).decode().strip()
    assert (await runtime.run(["kill", "-0", child], {})).exit_code == 0
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert (await runtime.run(["kill", "-0", child], {})).exit_code != 0
    assert "sleep 30" not in (await runtime.run(["ps", "-eo", "args"], {})).stdout


async def test_background_process_logs_and_lives_until_stop() -> None:
    box = EvsysRuntime(EvsysConfig())
    await box.start()
    await box.run_background(["sh", "-c", "echo started; exec sleep 300"], {"Y": "1"}, "server.log")
    await box.run(["sh", "-c", "until grep -q started server.log; do sleep 0.05; done"], {})
    assert "sleep 300" in (await box.run(["ps", "-eo", "args"], {})).stdout
    assert await box.alive()
    await box.stop()
    await box.stop()  # idempotent
    assert not await box.alive()


async def test_host_loopback_services_are_reached_only_through_host_url(runtime: EvsysRuntime) -> None:
    async with http_server("127.0.0.1", b"interception") as port, http_server("127.0.0.1", b"other") as other:
        url = f"http://127.0.0.1:{port}/v1"
        assert (await fetch(runtime, url))[0] == 3  # a sandbox has its own loopback
        inside = runtime.host_url(url)
        assert await fetch(runtime, inside) == (0, "interception")
        assert (await fetch(runtime, f"http://127.0.0.1:{other}/"))[0] == 3  # not exposed: still closed
        agent = runtime.with_user("agent")
        assert await fetch(agent, inside) == (0, "interception")


async def test_host_files_stay_out_of_reach_unlike_the_subprocess_runtime(tmp_path: Path) -> None:
    canary = tmp_path / "host-secret.txt"
    canary.write_text("host secret")
    host = make_runtime(SubprocessConfig())
    await host.start()
    try:  # positive control: verifiers' subprocess runtime runs on the host and reads it
        assert (await host.run(["cat", str(canary)], {})).stdout == "host secret"
    finally:
        await host.stop()
    box = EvsysRuntime(EvsysConfig())
    await box.start()
    try:
        result = await box.run(["cat", str(canary)], {})
        assert result.exit_code != 0 and "host secret" not in result.stdout
    finally:
        await box.stop()


def host_address() -> str | None:
    """An address of this host other than loopback (what a public sandbox reaches, like a container)."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))
        address = probe.getsockname()[0]
        return None if address.startswith("127.") else address
    return None


async def test_framework_only_policy_closes_egress_for_the_agent_phase() -> None:
    address = host_address()
    if address is None:
        pytest.skip("this host has no address besides loopback")
    box = EvsysRuntime(EvsysConfig(allow=[]))
    await box.start()
    try:
        async with http_server("0.0.0.0", b"outside") as port, http_server("127.0.0.1", b"framework") as fw:
            outside = f"http://{address}:{port}/"
            assert await fetch(box, outside) == (0, "outside")  # setup is trusted with egress
            route = box.host_url(f"http://127.0.0.1:{fw}/v1")
            await box.prepare_execution([route])
            assert (await fetch(box, outside))[0] == 3
            assert await fetch(box, route) == (0, "framework")  # the framework's routes stay open
            await box.prepare_execution(None)  # another trusted phase (grading)
            assert await fetch(box, outside) == (0, "outside")
    finally:
        await box.stop()


async def test_unsupported_requests_are_refused_clearly(runtime: EvsysRuntime) -> None:
    with pytest.raises(SandboxError, match="not supported"):
        await runtime.expose(8000)
    with pytest.raises(SandboxError, match="no-such-backend"):
        await EvsysRuntime(EvsysConfig(backend="no-such-backend")).start()
    box = EvsysRuntime(EvsysConfig(allow=["*.example.com"]))
    await box.start()
    try:
        with pytest.raises(SandboxError, match="plain host names"):
            await box.prepare_execution([])
    finally:
        await box.stop()


async def test_image_gives_the_box_its_own_root_filesystem() -> None:
    """`image` runs an OCI image (python:3.11-slim, verifiers' container default; pulled, or synthesised
    from Debian's mirrors when no registry answers) instead of the host's read-only /usr."""
    plain = EvsysRuntime(EvsysConfig())
    await plain.start()
    try:  # positive control: without an image, /usr is the host's, read-only
        assert (await plain.run(["touch", "/usr/local/bin/probe"], {})).exit_code != 0
    finally:
        await plain.stop()
    box = EvsysRuntime(EvsysConfig(image="python:3.11-slim"))
    await box.start()
    try:
        assert (await box.run(["touch", "/usr/local/bin/probe"], {})).exit_code == 0
        assert (await box.run(["python3", "-c", "print(6 * 7)"], {})).stdout == "42\n"
    finally:
        await box.stop()


async def test_output_kept_in_memory_is_bounded() -> None:
    box = EvsysRuntime(EvsysConfig(max_output_mb=1))
    await box.start()
    try:
        result = await box.run(["sh", "-c", "head -c 5000000 /dev/zero | tr '\\0' x; echo done >&2"], {})
        assert result.exit_code == 0 and result.stderr == "done\n"
        assert result.stdout.startswith("x" * (1 << 20)) and len(result.stdout) < (1 << 20) + 200
        assert "5,000,000 bytes in all" in result.stdout
    finally:
        await box.stop()
