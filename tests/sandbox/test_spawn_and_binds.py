"""`LocalSandbox.spawn` (long-lived processes with streaming stdio) and `SandboxSpec.binds`."""

from __future__ import annotations

import asyncio
import os

import pytest
from sandbox_helpers import spec

from evsys.records import Bind
from evsys.sandbox import LocalSandbox, SandboxError

PS = "ps -eo user=,args= | grep -v -e '^root' -e 'ps -eo' -e '__evsys' || true"


async def agent_processes(sandbox: LocalSandbox) -> list[str]:
    """Command lines of the agent user's processes (the worker pool's bash excluded)."""
    result = await sandbox.exec(PS, user="root")
    return [line for line in result.stdout.splitlines() if line.strip() and "grep" not in line]


async def test_spawn_streams_stdin_and_stdout_line_by_line(sandbox):
    proc = await sandbox.spawn(["cat"])
    assert proc.pid is not None and proc.pid > 1
    for line in (b"first\n", b"second\n"):
        proc.stdin.write(line)
        await proc.stdin.drain()
        # each line comes back before stdin is closed: nothing waits for the process to end
        assert await asyncio.wait_for(proc.stdout.readline(), 10) == line
    proc.stdin.close()
    assert await proc.wait() == 0
    assert proc.returncode == 0


async def test_spawn_separates_stderr_and_reports_the_exit_code(sandbox):
    proc = await sandbox.spawn(["bash", "-c", "echo out; echo err >&2; exit 3"], env={"X": "1"})
    assert await proc.wait() == 3
    assert await proc.stdout.read() == b"out\n"
    assert await proc.stderr.read() == b"err\n"


async def test_spawn_runs_as_the_agent_in_the_given_cwd_with_env(sandbox):
    proc = await sandbox.spawn(
        ["bash", "-c", 'echo "$(id -u) $PWD $GREETING"'], cwd="/tmp", env={"GREETING": "hi"}
    )
    await proc.wait()
    assert (await proc.stdout.read()).decode().split() == [str(sandbox.agent_uid), "/tmp", "hi"]


async def test_spawn_of_a_missing_program_exits_127_with_a_message(sandbox):
    proc = await sandbox.spawn(["no-such-program-evsys"])
    assert await proc.wait() == 127
    assert b"no-such-program-evsys: not found" in await proc.stderr.read()


async def test_kill_ends_the_whole_tree_including_setsid_children(sandbox):
    script = "sleep 101 & setsid sleep 102 & (sleep 103 &) ; echo up; sleep 104"
    proc = await sandbox.spawn(["bash", "-c", script])
    assert await asyncio.wait_for(proc.stdout.readline(), 10) == b"up\n"
    assert len([p for p in await agent_processes(sandbox) if "sleep 10" in p]) == 4
    await proc.kill()
    assert proc.returncode == 137
    assert [p for p in await agent_processes(sandbox) if "sleep 10" in p] == []
    await proc.kill()  # idempotent


async def test_spawn_timeout_kills_the_process(sandbox):
    proc = await sandbox.spawn(["bash", "-c", "echo begun; sleep 60"], timeout=0.5)
    assert await asyncio.wait_for(proc.wait(), 20) == 137
    assert proc.timed_out
    assert await proc.stdout.read() == b"begun\n"


@pytest.mark.needs_sandbox
async def test_stopping_the_sandbox_ends_a_spawned_process():
    sandbox = LocalSandbox(spec())
    await sandbox.start()
    proc = await sandbox.spawn(["sleep", "60"])
    await sandbox.stop()
    assert await asyncio.wait_for(proc.wait(), 10) != 0
    with pytest.raises(ConnectionError):
        proc.stdin.write(b"late\n")
    with pytest.raises(SandboxError, match="not running"):
        await sandbox.spawn(["true"])


async def test_spawn_rejects_an_empty_argv(sandbox):
    with pytest.raises(SandboxError, match="non-empty argv"):
        await sandbox.spawn([])


@pytest.mark.needs_sandbox
async def test_read_only_bind_is_visible_but_not_writable_even_for_root(tmp_path):
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "tool.txt").write_text("installed\n")
    os.chmod(tmp_path, 0o755)
    os.chmod(tmp_path / "tree", 0o755)
    bind = Bind(src=tmp_path / "tree", dst="/opt/evsys-harness/demo")
    async with LocalSandbox(spec(binds=[bind])) as sandbox:
        assert (await sandbox.exec("cat /opt/evsys-harness/demo/tool.txt")).stdout == "installed\n"
        for user in ("agent", "root"):
            result = await sandbox.exec("echo x > /opt/evsys-harness/demo/new", user=user)
            assert result.exit_code != 0
    assert sorted(p.name for p in (tmp_path / "tree").iterdir()) == ["tool.txt"]


@pytest.mark.needs_sandbox
async def test_a_bind_from_the_hosts_sys_still_works():
    # the setup step drops the host's /sys from the mount table bwrap reads unless a bind needs it
    source = "/sys/class/net"
    async with LocalSandbox(spec(binds=[Bind(src=source, dst="/opt/hostnet")])) as sandbox:
        assert "lo" in (await sandbox.exec("ls /opt/hostnet")).stdout.split()


@pytest.mark.needs_sandbox
async def test_writable_bind_lets_root_write_to_the_host_directory(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    async with LocalSandbox(spec(binds=[Bind(src=target, dst="/opt/build", read_only=False)])) as sandbox:
        assert (await sandbox.exec("echo built > /opt/build/result", user="root")).ok
    assert (target / "result").read_text() == "built\n"


@pytest.mark.needs_sandbox
async def test_a_bound_unix_socket_is_reachable_from_the_no_network_sandbox(tmp_path):
    os.chmod(tmp_path, 0o755)
    path = tmp_path / "svc.sock"
    server = await asyncio.start_unix_server(_echo_upper, path=str(path))
    os.chmod(path, 0o666)
    probe = (
        "import socket; s = socket.socket(socket.AF_UNIX); s.connect('/run/evsys/svc.sock');"
        "s.sendall(b'ping\\n'); print(s.recv(100).decode().strip())"
    )
    try:
        async with LocalSandbox(spec(binds=[Bind(src=path, dst="/run/evsys/svc.sock")])) as sandbox:
            result = await sandbox.exec(f'python3 -c "{probe}"')
            assert result.stdout.strip() == "PING", result.stderr
    finally:
        server.close()


async def _echo_upper(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write((await reader.readline()).upper())
    await writer.drain()
    writer.close()


@pytest.mark.parametrize(
    ("dst", "message"),
    [
        ("/tests", "would cover /tests"),
        ("/logs", "would cover /logs/verifier"),
        ("/usr/local/x", "would cover /usr"),
        ("/proc/x", "would cover /proc"),
        ("/", "would cover /"),
        ("relative/path", "must be absolute"),
        ("/opt/../etc", "must not contain"),
    ],
)
@pytest.mark.needs_sandbox
async def test_binds_that_would_cover_sandbox_machinery_are_refused(tmp_path, dst, message):
    sandbox = LocalSandbox(spec(binds=[Bind(src=tmp_path, dst=dst)]))
    with pytest.raises(SandboxError, match=message):
        await sandbox.start()


@pytest.mark.needs_sandbox
async def test_a_bind_with_a_missing_source_names_it(tmp_path):
    missing = tmp_path / "not-there"
    with pytest.raises(SandboxError, match="not-there does not exist"):
        await LocalSandbox(spec(binds=[Bind(src=missing, dst="/opt/x")])).start()
