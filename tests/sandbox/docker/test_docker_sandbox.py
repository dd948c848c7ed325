"""The docker backend against a real dockerd: commands, users, timeouts that kill the process tree, bounded
output, files, process kill, limits, network modes, the image's ENTRYPOINT, and stale-container cleanup."""

from __future__ import annotations

import asyncio
import io
import subprocess
import tarfile

import pytest

from evsys.records import ImageSpec, SandboxSpec
from evsys.sandbox.docker import DockerSandbox
from evsys.sandbox.docker.sandbox import LABEL_OWNER, LABEL_SANDBOX
from evsys.sandbox.registry import sandbox_backends

pytestmark = pytest.mark.usefixtures("docker_env")


def spec(name: str, **kwargs) -> SandboxSpec:
    return SandboxSpec(name=f"dk-{name}", **kwargs)


async def test_docker_is_a_registered_backend():
    assert "docker" in sandbox_backends()
    assert await DockerSandbox.unavailable() is None


async def test_exec_output_exit_code_cwd_env_and_users():
    async with DockerSandbox(spec("basic", env={"FROM_SPEC": "s"})) as sb:
        result = await sb.exec("echo out; echo err >&2; exit 3")
        assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 3)
        result = await sb.exec("pwd; echo $FROM_SPEC $EXTRA", env={"EXTRA": "e"})
        assert result.stdout == "/app\ns e\n"
        assert (await sb.exec("pwd", cwd="/tmp")).stdout == "/tmp\n"
        agent = await sb.exec("id -un; touch /app/mine && echo ok; touch /etc/no 2>/dev/null || echo denied")
        assert agent.stdout == "agent\nok\ndenied\n"
        assert (await sb.exec("id -u", user="root")).stdout == "0\n"
        assert (await sb.exec("cat", stdin=b"piped")).stdout == "piped"


async def test_timeout_keeps_partial_output_and_kills_the_process_tree():
    async with DockerSandbox(spec("timeout")) as sb:
        command = "echo before; (sleep 300 &); sleep 301 & sleep 302"
        result = await sb.exec(command, timeout=1.5)
        assert result.timed_out and result.stdout == "before\n"
        left = await sb.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '", user="root")
        # the double-forked child (reparented to the init) went too: it stayed in the command's session
        assert "sleep 30" not in left.stdout


async def test_a_command_silent_for_longer_than_the_clients_http_timeout_still_finishes(monkeypatch):
    from evsys.sandbox.docker import api

    # a client whose HTTP timeout (the SDK's default is 60 s) is shorter than the command's silence
    short = api.sdk().DockerClient(base_url=api.docker_host(), timeout=1)
    monkeypatch.setattr(api, "client", lambda: short)
    async with DockerSandbox(spec("silent")) as sb:
        result = await sb.exec("sleep 2.5; echo done", timeout=30)
    assert (result.exit_code, result.stdout, result.timed_out) == (0, "done\n", False)


async def test_output_is_bounded_while_streaming():
    async with DockerSandbox(spec("bomb")) as sb:
        result = await sb.exec("head -c 40000000 /dev/zero | tr '\\0' x; echo; echo END")
        assert result.exit_code == 0
        assert len(result.stdout_bytes) == sb.spec.max_output_bytes
        assert result.stdout_truncated and result.stdout_total_bytes == 40_000_005
        assert "bytes of output omitted here" in result.stdout_shown
        assert result.stdout_bytes.endswith(b"END\n") and result.stdout_bytes.startswith(b"xxxx")


async def test_files_in_and_out_keep_modes(tmp_path):
    src = tmp_path / "data"
    src.mkdir()
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "run.sh").chmod(0o755)
    (src / "skip.txt").write_text("left out")
    async with DockerSandbox(spec("files")) as sb:
        await sb.upload(src, "/opt/data")
        assert (await sb.exec("/opt/data/run.sh")).stdout == "ran\n"
        await sb.exec("mkdir -p /logs/agent/sub && echo hi > /logs/agent/sub/f.txt")
        data = await sb.download_tar("/logs/agent")
        names = tarfile.open(fileobj=io.BytesIO(data)).getnames()
        assert "agent/sub/f.txt" in names
        await sb.download("/opt/data/run.sh", tmp_path / "back.sh")
        assert (tmp_path / "back.sh").read_text() == "#!/bin/sh\necho ran\n"
        assert (tmp_path / "back.sh").stat().st_mode & 0o777 == 0o755


async def test_spec_files_are_placed_before_start_without_excluded_paths(tmp_path):
    from evsys.records import FileCopy

    ctx = tmp_path / "ctx"
    (ctx / "cache").mkdir(parents=True)
    (ctx / "main.py").write_text("print(1)\n")
    (ctx / "cache" / "big").write_text("x")
    copy = FileCopy(src=ctx, dst="/app", exclude=("cache",))
    async with DockerSandbox(spec("copies", files=[copy])) as sb:
        listing = await sb.exec("ls -A /app; stat -c %U /app/main.py")
        assert listing.stdout == "main.py\nagent\n"


async def test_kill_processes_leaves_only_the_keep_alive():
    async with DockerSandbox(spec("kill")) as sb:
        await sb.exec("nohup sleep 1000 >/dev/null 2>&1 & nohup sleep 1001 >/dev/null 2>&1 &")
        before = await sb.exec("ls -d /proc/[0-9]* | wc -l", user="root")
        assert int(before.stdout) >= 4  # pid 1, two sleeps, this shell
        killed = await sb.kill_processes()
        assert killed >= 2
        after = await sb.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '", user="root")
        assert "sleep 1000" not in after.stdout and "sleep 1001" not in after.stdout
        assert (await sb.exec("echo alive")).stdout == "alive\n"


async def test_memory_limit_kills_a_hog_and_pids_limit_holds():
    async with DockerSandbox(spec("limits", memory_mb=64, pids_max=64)) as sb:
        hog = await sb.exec("head -c 300000000 /dev/zero | tail -c 250000000 | wc -c")
        assert hog.exit_code != 0 or hog.stdout.strip() != "250000000"
        forks = await sb.exec("for i in $(seq 200); do sleep 5 & done 2>&1 | tail -1; wait", timeout=20)
        assert "bash: fork:" in forks.stdout + forks.stderr  # the 65th process could not be made


async def test_network_modes():
    async with DockerSandbox(spec("nonet")) as sb:
        assert (await sb.exec("ls /sys/class/net")).stdout.split() == ["lo"]
    async with DockerSandbox(spec("pub", network="public")) as sb:
        assert "eth0" in (await sb.exec("ls /sys/class/net")).stdout.split()


async def test_image_entrypoint_runs_before_the_agent(dockerd, docker_base, tmp_path):
    (tmp_path / "entry.sh").write_text('#!/bin/sh\necho started > /var/tmp/entrypoint-ran\nexec "$@"\n')
    (tmp_path / "entry.sh").chmod(0o755)
    (tmp_path / "Dockerfile").write_text(
        f'FROM {docker_base}\nCOPY entry.sh /entry.sh\nENTRYPOINT ["/entry.sh"]\nCMD ["false"]\n'
    )
    ref = "evsys-test/entrypoint:1"
    await _docker(dockerd, "build", "-q", "-t", ref, str(tmp_path))
    async with DockerSandbox(spec("entry", image=ImageSpec(ref=ref))) as sb:
        assert (await sb.exec("cat /var/tmp/entrypoint-ran")).stdout == "started\n"
        keep_alive = await sb.exec(
            "cat /proc/$(cat /run/evsys/keep-alive)/cmdline | tr '\\0' ' '", user="root"
        )
        assert keep_alive.stdout == "sleep infinity "


async def test_missing_image_is_a_clear_error():
    from evsys.sandbox.base import SandboxError

    with pytest.raises(SandboxError, match="image 'no/such:image' is not in the Docker daemon"):
        await DockerSandbox(spec("noimg", image=ImageSpec(ref="no/such:image"))).start()


async def test_stop_is_idempotent_and_stale_containers_are_removed(dockerd, docker_base):
    sb = DockerSandbox(spec("stop"))
    await sb.stop()  # before start: nothing to do
    await sb.start()
    await sb.stop()
    await sb.stop()
    labels = f"--label={LABEL_SANDBOX}=dk-stale --label={LABEL_OWNER}=%s" % _dead_owner()
    created = (await _docker(dockerd, "run", "-d", *labels.split(), docker_base, "sleep", "infinity")).strip()
    assert await DockerSandbox.cleanup_stale() >= 1
    with pytest.raises(subprocess.CalledProcessError):
        await _docker(dockerd, "inspect", created)


async def _docker(host: str, *args: str) -> str:
    """Run the docker CLI against the test daemon (off the event loop); its stdout."""
    argv = ["docker", "-H", host, *args]
    done = await asyncio.to_thread(subprocess.run, argv, check=True, capture_output=True, text=True)
    return done.stdout


def _dead_owner() -> str:
    import socket

    proc = subprocess.Popen(["true"])
    proc.wait()
    return f"{socket.gethostname()}:{proc.pid}:0"


async def test_concurrent_sandboxes_do_not_share_files():
    async def one(i: int) -> str:
        async with DockerSandbox(spec(f"conc{i}")) as sb:
            await sb.exec(f"echo {i} > /app/who")
            await asyncio.sleep(0.2)
            return (await sb.exec("cat /app/who; ls /app")).stdout

    outs = await asyncio.gather(*(one(i) for i in range(4)))
    assert outs == [f"{i}\nwho\n" for i in range(4)]


async def test_an_image_the_daemon_lacks_is_loaded_from_its_source(dockerd, docker_base, tmp_path):
    archive = tmp_path / "base.tar"
    await _docker(dockerd, "save", "-o", str(archive), docker_base)
    image = ImageSpec(ref="evsys-test/loaded:1", source=f"docker-archive:{archive}")
    async with DockerSandbox(spec("load", image=image)) as sb:
        assert (await sb.exec("cat /etc/debian_version")).stdout.startswith("12")
    assert "evsys-test/loaded:1" in await _docker(dockerd, "images", "--format", "{{.Repository}}:{{.Tag}}")


async def test_an_image_from_evsys_storage_runs_by_its_content_not_a_same_named_stale_one(
    dockerd, docker_base, tmp_path
):
    await _docker(dockerd, "run", "--name", "dk-marking", docker_base, "sh", "-c", "echo new > /marker")
    await _docker(dockerd, "commit", "dk-marking", "evsys-test/marked:1")
    await _docker(dockerd, "rm", "dk-marking")
    image_id = (await _docker(dockerd, "inspect", "-f", "{{.Id}}", "evsys-test/marked:1")).strip()
    archive = tmp_path / "marked.tar"
    await _docker(dockerd, "save", "-o", str(archive), "evsys-test/marked:1")
    await _docker(dockerd, "rmi", "evsys-test/marked:1")
    await _docker(dockerd, "tag", docker_base, "evsys-test/stale:1")  # the daemon's copy of the name: stale
    stale = ImageSpec(ref="evsys-test/stale:1", source=f"docker-archive:{archive}")
    async with DockerSandbox(spec("stale", image=stale)) as sb:  # by name alone, the stale copy runs
        assert (await sb.exec("cat /marker")).exit_code != 0
    fresh = stale.model_copy(update={"image_id": image_id})
    async with DockerSandbox(spec("fresh", image=fresh)) as sb:
        assert (await sb.exec("cat /marker")).stdout == "new\n"
    archive.unlink()  # loaded once per content: a second sandbox of it needs no copy
    async with DockerSandbox(spec("again", image=fresh)) as sb:
        assert (await sb.exec("cat /marker")).stdout == "new\n"
