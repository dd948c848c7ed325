"""The daemon's own file operations (`files` and `pack`): placing trees, clearing logs, copying out — with no
process started — and the same results through the `Sandbox` base class's exec-built defaults other backends
get."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import time

import pytest

from evsys.sandbox.base import Sandbox, SandboxError


def tar_of(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", **fields) -> tuple:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    info.mode = fields.pop("mode", 0o644)
    for key, value in fields.items():
        setattr(info, key, value)
    return info, data if kind == tarfile.REGTYPE else None


class ShellOnly(Sandbox):
    """A running local sandbox seen through the required operations only: every file helper takes the
    base class's default built on `exec`."""

    def __init__(self, sandbox) -> None:
        super().__init__(sandbox.spec)
        self._sandbox = sandbox

    async def start(self) -> None:
        """Already started."""

    async def exec(self, command, **kwargs):
        return await self._sandbox.exec(command, **kwargs)

    async def kill_processes(self) -> int:
        return await self._sandbox.kill_processes()

    async def stop(self) -> None:
        """The fixture stops the real sandbox."""


LONG = "d" * 120 + "/" + "f" * 130 + ".txt"
TREE = [
    member("bin", tarfile.DIRTYPE, mode=0o750),
    member("bin/run.sh", data=b"#!/bin/sh\necho run\n", mode=0o755, mtime=1_600_000_000),
    member("data/nested/deep.bin", data=bytes(range(256)) * 4000),
    member("link", tarfile.SYMTYPE, linkname="bin/run.sh"),
    member(LONG, data=b"long name\n"),
    member("uni-\u00e9\u4e2d.txt", data=b"unicode\n"),
]


@pytest.mark.parametrize("path", ["daemon", "shell"])
async def test_replace_tree_places_a_fresh_tree_and_clears_logs(sandbox, path):
    target = sandbox if path == "daemon" else ShellOnly(sandbox)
    await sandbox.exec(
        "mkdir -p /place/old /logs/verifier/sub && touch /place/old/stale /logs/verifier/reward.txt "
        "/logs/verifier/sub/x",
        user="root",
    )
    await target.replace_tree(tar_of(TREE), "/place", empty=["/logs/verifier"], mkdir=["/made/here"])
    listing = await sandbox.exec(
        "cd /place && find . -printf '%p %M %u\\n' | sort && ls -A /logs/verifier | wc -l && "
        "test -d /made/here && readlink link && ./link && stat -c %Y bin/run.sh && "
        "md5sum data/nested/deep.bin",
        user="root",
    )
    lines = listing.stdout.splitlines()
    assert "./old" not in listing.stdout  # removed first
    assert "./bin drwxr-x--- root" in lines
    assert "./bin/run.sh -rwxr-xr-x root" in lines
    assert "./link lrwxrwxrwx root" in lines
    assert f"./{LONG} -rw-r--r-- root" in lines
    assert "./uni-\u00e9\u4e2d.txt -rw-r--r-- root" in lines
    assert "0" in lines  # /logs/verifier emptied, kept
    assert lines[-4:-1] == ["bin/run.sh", "run", "1600000000"]
    assert lines[-1].split()[0] == hashlib.md5(bytes(range(256)) * 4000).hexdigest()


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ([member("../escape", data=b"x")], "../escape"),
        ([member("/abs/file", data=b"x")], "/abs/file"),
        (
            [member("evil", tarfile.SYMTYPE, linkname="/etc"), member("evil/passwd", data=b"owned")],
            "evil/passwd",
        ),
    ],
)
async def test_members_that_would_write_outside_are_refused(sandbox, bad, named):
    with pytest.raises(SandboxError, match=r"refusing tar member|cannot create the parent") as info:
        await sandbox.files(remove=["/place"], extract="/place", data=tar_of(bad))
    assert named.lstrip("/") in str(info.value) or named in str(info.value)
    check = await sandbox.exec("cat /etc/passwd | grep -c owned; ls /escape /abs 2>&1 | wc -l", user="root")
    assert check.stdout.split()[0] == "0"


async def test_replace_tree_removes_a_planted_symlink_instead_of_following_it(sandbox):
    await sandbox.exec("mkdir -p /victim && echo keep > /victim/file && ln -s /victim /solution", user="root")
    await sandbox.replace_tree(tar_of([member("solve.sh", data=b"echo ok\n")]), "/solution")
    result = await sandbox.exec("cat /victim/file; test -L /solution || cat /solution/solve.sh", user="root")
    assert result.stdout == "keep\necho ok\n"


async def test_download_copies_trees_links_and_large_files_byte_exact(sandbox, tmp_path):
    await sandbox.exec(
        f"mkdir -p /out/a && head -c 3000000 /dev/urandom > /out/a/big && ln -s a/big /out/rel && "
        f"ln -s /etc/passwd /out/abs && mkfifo /out/fifo && mkdir -p /out/{'x' * 150} && "
        f"echo deep > /out/{'x' * 150}/{'y' * 120} && chmod 640 /out/a/big",
        user="root",
    )
    digest = (await sandbox.exec("md5sum /out/a/big", user="root")).stdout.split()[0]
    await sandbox.download("/out", tmp_path / "out")
    got = tmp_path / "out"
    assert hashlib.md5((got / "a" / "big").read_bytes()).hexdigest() == digest
    assert oct((got / "a" / "big").stat().st_mode & 0o777) == "0o640"
    assert os.readlink(got / "rel") == "a/big"
    assert "abs" not in os.listdir(got)  # it would point at the host's /etc/passwd
    assert (got / ("x" * 150) / ("y" * 120)).read_text() == "deep\n"
    assert not (got / "fifo").exists()


async def test_download_of_a_missing_path_names_it(sandbox, tmp_path):
    with pytest.raises(SandboxError, match=r"download /nope/here .* cannot pack /nope/here: No such file"):
        await sandbox.download("/nope/here", tmp_path / "x")


async def test_file_operations_start_no_process(sandbox, tmp_path):
    await sandbox.exec("true")  # the user's first command, so later ones would have workers
    before = await sandbox.exec("cat /proc/loadavg", user="root")
    last_pid_before = int(before.stdout.split()[-1])
    for _ in range(5):
        await sandbox.replace_tree(tar_of(TREE), "/place", empty=["/logs/verifier"])
        await sandbox.download("/place", tmp_path / f"copy-{time.monotonic_ns()}")
    after = await sandbox.exec("cat /proc/loadavg", user="root")
    # the forked `cat` itself takes a pid or two; 10 file operations through processes would take 30+
    assert int(after.stdout.split()[-1]) - last_pid_before < 6


async def test_upload_into_a_read_only_place_fails_clearly(sandbox, tmp_path):
    src = tmp_path / "f.txt"
    src.write_text("x")
    with pytest.raises(
        SandboxError, match=r"upload .* -> /usr/evsys-test.txt failed: .*(Read-only|read-only)"
    ):
        await sandbox.upload(src, "/usr/evsys-test.txt")
    assert (await sandbox.exec("test -e /usr/evsys-test.txt")).exit_code == 1


@pytest.mark.parametrize("path", ["daemon", "shell"])
async def test_read_file_gives_the_last_bytes_of_a_file(sandbox, path):
    target = sandbox if path == "daemon" else ShellOnly(sandbox)
    await sandbox.exec("seq 1 100000 > /tmp/numbers && printf 'short' > /tmp/short", user="root")
    expected = (await sandbox.exec("tail -c 1000 /tmp/numbers")).stdout_bytes
    assert await target.read_file("/tmp/numbers", 1000) == expected
    assert await target.read_file("/tmp/short", 1000) == b"short"
    with pytest.raises(SandboxError, match="/tmp/missing"):
        await target.read_file("/tmp/missing", 1000)


async def test_read_file_refuses_what_is_not_a_regular_file(sandbox):
    await sandbox.exec("ln -s /etc/hostname /tmp/link && mkfifo /tmp/fifo", user="root")
    cases = (
        ("/tmp/link", "Too many levels|symbolic link"),
        ("/tmp", "not a regular file"),
        ("/tmp/fifo", "not a"),
    )
    for bad, why in cases:  # a FIFO with no writer must not hang the daemon
        with pytest.raises(SandboxError, match=rf"cannot read {bad}: ({why})"):
            await sandbox.read_file(bad, 10)


async def test_exec_program_runs_without_a_shell(sandbox):
    result = await sandbox.exec_program(["printf", "%s|%s", "a b", "$HOME"])
    assert (result.exit_code, result.stdout) == (0, "a b|$HOME")  # no word splitting, no expansion
    missing = await sandbox.exec_program(["no-such-program"])
    assert missing.exit_code == 127 and "cannot start no-such-program" in missing.stderr
    own_path = await sandbox.exec_program(["tool"], env={"PATH": "/opt/tools"})
    assert own_path.exit_code == 127  # looked up on the request's PATH only
    slow = await sandbox.exec_program(["sleep", "5"], timeout=0.3)
    assert slow.timed_out and slow.exit_code == 137
    with pytest.raises(SandboxError, match="non-empty argv"):
        await sandbox.exec_program([])


async def test_exec_program_output_file_is_the_users_own(sandbox):
    argv = ["bash", "-c", "echo out; echo err >&2; exit 3"]
    result = await sandbox.exec_program(argv, output_file="/tmp/o.txt")
    assert (result.exit_code, result.stdout, result.stderr) == (3, "", "")
    check = await sandbox.exec("stat -c %U /tmp/o.txt; cat /tmp/o.txt")
    assert check.stdout == "agent\nout\nerr\n"
    denied = await sandbox.exec_program(["true"], output_file="/root/x.txt")
    assert denied.exit_code == 126 and "cannot open output file '/root/x.txt'" in denied.stderr


@pytest.mark.parametrize("path", ["daemon", "shell"])
async def test_exec_program_writes_all_output_to_the_file(sandbox, path):
    target = sandbox if path == "daemon" else ShellOnly(sandbox)
    await sandbox.exec("printf 'echo to-out\\necho to-err >&2\\npwd\\nexit 5\\n' > /tmp/s.sh", user="root")
    result = await target.exec_program(
        ["bash", "/tmp/s.sh"], output_file="/tmp/s.out", user="root", cwd="/app", env={"X": "1"}, timeout=10
    )
    assert result.exit_code == 5
    assert (await sandbox.exec("cat /tmp/s.out", user="root")).stdout == "to-out\nto-err\n/app\n"


async def test_a_very_deep_tree_is_copied_to_a_bounded_depth_without_harm(sandbox, tmp_path):
    deep = "/".join(["d"] * 400)
    made = await sandbox.exec(
        f"mkdir -p /app/out/{deep} && echo bottom > /app/out/{deep}/f && echo top > /app/out/top"
    )
    assert made.exit_code == 0, made.stderr
    await sandbox.download("/app/out", tmp_path / "out")
    assert (tmp_path / "out" / "top").read_text() == "top\n"
    assert (tmp_path / "out" / "d" / "d" / "d").is_dir()
    assert (await sandbox.exec("echo alive")).stdout == "alive\n"  # the daemon is fine


async def test_files_whose_data_crosses_a_flush_unaligned_are_all_copied(sandbox):
    # 30 files of 20,001 bytes: whatever the directory order, the daemon's 256 KiB flush point is passed
    # inside a file's data at an offset that is not a multiple of 512 (the tar used to lose its alignment
    # there and end early)
    files = {f"f{i:02}.bin": os.urandom(20_001) for i in range(30)}
    for name, data in files.items():
        await sandbox.exec(f"mkdir -p /srv/t && cat > /srv/t/{name}", user="root", stdin=data, cwd="/")
    tree = await sandbox.copy_out("/srv/t")
    with tarfile.open(fileobj=io.BytesIO(b"".join(tree.chunks))) as tar:
        got = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert got == {f"t/{name}": data for name, data in files.items()}
