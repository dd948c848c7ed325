"""Conformance: files in and out — upload, download, permissions, tars, `read_file`, `write_file`,
`replace_tree`."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from evsys.records import CopyOutLimits
from evsys.sandbox.base import SandboxError

pytestmark = pytest.mark.asyncio


def _tree(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (root / "bin" / "run.sh").chmod(0o755)
    (root / "data" / "nested").mkdir(parents=True)
    (root / "data" / "nested" / "blob.bin").write_bytes(bytes(range(256)) * 512)
    (root / "secret.txt").write_text("only root\n")
    (root / "secret.txt").chmod(0o600)
    (root / "link").symlink_to("bin/run.sh")
    return root


def _tar(**files: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


async def test_upload_a_file_keeps_content_and_mode(sandbox, tmp_path):
    src = tmp_path / "tool.sh"
    src.write_text("#!/bin/sh\necho tool-ran\n")
    src.chmod(0o750)
    await sandbox.upload(src, "/opt/tools/tool.sh")
    result = await sandbox.exec("/opt/tools/tool.sh; stat -c '%a %U' /opt/tools/tool.sh", user="root")
    assert result.stdout == "tool-ran\n750 root\n"


async def test_upload_a_directory_recursively_with_permissions(sandbox, tmp_path):
    await sandbox.upload(_tree(tmp_path / "tree"), "/srv/tree")
    check = await sandbox.exec(
        "cd /srv/tree && bin/run.sh && readlink link && stat -c '%a' secret.txt && "
        "md5sum < data/nested/blob.bin",
        user="root",
    )
    blob = bytes(range(256)) * 512
    assert check.stdout.splitlines()[:3] == ["ran", "bin/run.sh", "600"]
    assert check.stdout.splitlines()[3].split()[0] == hashlib.md5(blob).hexdigest()
    denied = await sandbox.exec("cat /srv/tree/secret.txt", user="agent")
    assert denied.exit_code != 0  # root-owned 0600: not for the agent


async def test_upload_of_a_missing_source_is_an_error(sandbox, tmp_path):
    with pytest.raises(SandboxError, match="does not exist"):
        await sandbox.upload(tmp_path / "missing", "/tmp/x")


async def test_download_a_file_and_a_directory(sandbox, tmp_path):
    await sandbox.exec(
        "mkdir -p /app/out/sub && printf 'one\\n' > /app/out/a.txt && printf 'two' > /app/out/sub/b.bin "
        "&& chmod 741 /app/out/a.txt && ln -s a.txt /app/out/alias"
    )
    await sandbox.download("/app/out/a.txt", tmp_path / "single.txt")
    assert (tmp_path / "single.txt").read_text() == "one\n"
    await sandbox.download("/app/out", tmp_path / "out")
    out = tmp_path / "out"
    assert (out / "a.txt").read_text() == "one\n" and (out / "sub" / "b.bin").read_bytes() == b"two"
    assert oct((out / "a.txt").stat().st_mode & 0o777) == oct(0o741)
    assert os.readlink(out / "alias") == "a.txt"


async def test_download_never_creates_a_link_out_of_the_target(sandbox, tmp_path):
    made = await sandbox.exec("mkdir -p /app/evil && ln -s /etc/passwd /app/evil/pw && echo made")
    assert made.stdout == "made\n"  # the attack is in place
    await sandbox.download("/app/evil", tmp_path / "evil")
    link = tmp_path / "evil" / "pw"
    assert not (link.is_symlink() and os.readlink(link).startswith("/"))


async def test_download_of_a_missing_path_is_an_error(sandbox, tmp_path):
    with pytest.raises(SandboxError):
        await sandbox.download("/app/no-such-file", tmp_path / "x")
    assert not (tmp_path / "x").exists()


async def test_download_tar_holds_the_path_under_its_base_name(sandbox):
    await sandbox.exec("mkdir -p /app/logs/agent && echo hi > /app/logs/agent/log.txt")
    data = await sandbox.download_tar("/app/logs")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = {m.name.rstrip("/") for m in tar.getmembers()}
        member = tar.extractfile("logs/agent/log.txt")
        assert member is not None and member.read() == b"hi\n"
    assert {"logs", "logs/agent", "logs/agent/log.txt"} <= names


async def test_read_file_gives_the_tail(sandbox):
    await sandbox.exec("seq 1 20000 > /tmp/numbers; printf short > /tmp/short")
    expected = (await sandbox.exec("tail -c 100 /tmp/numbers")).stdout_bytes
    assert await sandbox.read_file("/tmp/numbers", 100) == expected
    assert await sandbox.read_file("/tmp/short", 100) == b"short"
    with pytest.raises(SandboxError):
        await sandbox.read_file("/tmp/missing", 100)


async def test_write_file_creates_parents_and_keeps_bytes_exactly(sandbox):
    data = bytes(range(256)) * 64 + b"\n\x00no trailing newline"
    await sandbox.write_file("/app/made/deep/blob.bin", data)
    await sandbox.write_file("notes.txt", b"relative to the workdir\n")
    check = await sandbox.exec("md5sum < made/deep/blob.bin; cat notes.txt; stat -c '%U' made/deep/blob.bin")
    lines = check.stdout.splitlines()
    assert lines[0].split()[0] == hashlib.md5(data).hexdigest()
    assert lines[1:] == ["relative to the workdir", "agent"]


async def test_write_file_replaces_a_longer_file_and_applies_the_mode(sandbox):
    await sandbox.write_file("/app/run.sh", b"#!/bin/sh\necho a much longer first version\n")
    await sandbox.write_file("/app/run.sh", b"#!/bin/sh\necho second\n", mode=0o750)
    check = await sandbox.exec("/app/run.sh && stat -c '%a' /app/run.sh")
    assert check.stdout == "second\n750\n"


async def test_write_file_writes_with_the_users_rights_only(sandbox):
    """The agent cannot write where only root may; root can, and its file is root's."""
    await sandbox.write_file("/etc/evsys-root-only", b"root wrote this", user="root")
    check = await sandbox.exec("cat /etc/evsys-root-only; echo; stat -c '%U' /etc/evsys-root-only")
    assert check.stdout == "root wrote this\nroot\n"  # positive control: the place exists and is writable
    with pytest.raises(SandboxError, match="cannot write /etc/evsys-root-only"):
        await sandbox.write_file("/etc/evsys-root-only", b"agent was here", user="agent")
    after = await sandbox.exec("cat /etc/evsys-root-only", user="root")
    assert after.stdout == "root wrote this"


async def test_replace_tree_places_a_fresh_tree_and_empties_dirs(sandbox):
    await sandbox.exec(
        "mkdir -p /place/old /logs/verifier/sub && touch /place/old/stale /logs/verifier/reward.txt",
        user="root",
    )
    await sandbox.replace_tree(
        _tar(**{"run.sh": b"echo placed\n"}), "/place", empty=["/logs/verifier"], mkdir=["/made/here"]
    )
    check = await sandbox.exec(
        "ls -A /place; ls -A /logs/verifier; test -d /made/here && echo made; stat -c %U /place/run.sh",
        user="root",
    )
    assert check.stdout == "run.sh\nmade\nroot\n"


async def test_replace_tree_replaces_a_planted_symlink_instead_of_following_it(sandbox):
    planted = await sandbox.exec(
        "mkdir -p /tmp/victim && ln -s /tmp/victim /tmp/dst && echo planted", user="root"
    )
    assert planted.stdout == "planted\n"
    await sandbox.replace_tree(_tar(**{"f.txt": b"x"}), "/tmp/dst")
    check = await sandbox.exec(
        "test -L /tmp/dst && echo link; ls -A /tmp/victim; cat /tmp/dst/f.txt", user="root"
    )
    assert check.stdout == "x"


async def test_copy_out_keeps_within_its_bounds_and_packs_first_names_first(sandbox):
    made = await sandbox.exec(
        "mkdir -p /logs/agent/deep/a/b/c/d /logs/verifier && head -c 200000 /dev/zero > /logs/agent/big.bin "
        "&& for i in $(seq 40); do echo $i > /logs/agent/f$i.txt; done && echo 1 > /logs/verifier/reward.txt "
        "&& echo x > /logs/agent/deep/a/b/c/d/leaf.txt && echo made",
        user="root",
    )
    assert made.stdout == "made\n"
    max_bytes = 64 * 1024
    limits = CopyOutLimits(max_bytes=max_bytes, max_entries=30, max_depth=4, max_file_bytes=1000)
    tree = await sandbox.copy_out("/logs", limits, first=["verifier"])
    data = b"".join(tree.chunks)
    assert len(data) <= max_bytes
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        reward = tar.extractfile("logs/verifier/reward.txt")
        assert reward is not None and reward.read() == b"1\n"  # packed first, so it made it in
    assert len(members) <= 30
    assert "logs/agent/deep/a/b/c/d/leaf.txt" not in members  # deeper than 4 levels
    assert members.get("logs/agent/big.bin") is None or members["logs/agent/big.bin"].size <= 1000
    assert tree.cut_count >= 1 and tree.cut  # what was cut is reported
    unbounded = await sandbox.copy_out("/logs/verifier")
    with tarfile.open(fileobj=io.BytesIO(b"".join(unbounded.chunks))) as tar:
        assert "verifier/reward.txt" in tar.getnames() and unbounded.cut_count == 0
