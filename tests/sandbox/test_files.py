"""upload/download with permissions, the spec's files layer, and path validation."""

# ruff: noqa: ASYNC240 - tiny host-side probes of what the sandbox may have touched

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sandbox_helpers import spec

from evsys.records import FileCopy
from evsys.sandbox import LocalSandbox, SandboxError


def make_tree(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "run.sh").write_text("#!/bin/sh\necho ran\n")
    os.chmod(root / "run.sh", 0o755)
    (root / "secret.txt").write_text("s")
    os.chmod(root / "secret.txt", 0o600)
    (root / "sub" / "data.bin").write_bytes(bytes(range(256)))
    return root


async def test_upload_directory_keeps_modes_and_is_root_owned(sandbox, tmp_path):
    await sandbox.upload(make_tree(tmp_path / "tests"), "/tests")
    r = await sandbox.exec(
        "stat -c '%n %a %U' /tests/run.sh /tests/secret.txt /tests/sub/data.bin; /tests/run.sh"
    )
    assert r.stdout.splitlines() == [
        "/tests/run.sh 755 root",
        "/tests/secret.txt 600 root",
        "/tests/sub/data.bin 644 root",
        "ran",
    ]
    assert (await sandbox.exec("cat /tests/secret.txt")).exit_code != 0  # agent cannot read a 0600 root file


async def test_upload_single_file_to_new_name(sandbox, tmp_path):
    src = tmp_path / "a.txt"
    src.write_text("hello")
    await sandbox.upload(src, "/solution/deep/b.txt")
    assert (await sandbox.exec("cat /solution/deep/b.txt")).stdout == "hello"


async def test_download_file_and_directory_round_trip(sandbox, tmp_path):
    await sandbox.exec("mkdir -p /app/out/x && printf data > /app/out/x/f && chmod 751 /app/out/x/f")
    await sandbox.download("/app/out", tmp_path / "got")
    f = tmp_path / "got" / "x" / "f"
    assert f.read_text() == "data"
    assert oct(f.stat().st_mode & 0o777) == "0o751"
    await sandbox.download("/app/out/x/f", tmp_path / "single")
    assert (tmp_path / "single").read_text() == "data"


async def test_download_symlink_does_not_follow_to_host(sandbox, tmp_path):
    await sandbox.exec(
        "mkdir -p /app/evil/sub && ln -s /etc/passwd /app/evil/link && ln -s ../../../../etc /app/evil/up "
        "&& ln -s sub /app/evil/inside"
    )
    await sandbox.download("/app/evil", tmp_path / "evil")
    # links that would point at the host's files once on the host are skipped; links inside are kept
    assert not os.path.lexists(tmp_path / "evil" / "link")
    assert not os.path.lexists(tmp_path / "evil" / "up")
    assert os.readlink(tmp_path / "evil" / "inside") == "sub"
    with pytest.raises(OSError):
        (tmp_path / "evil" / "up" / "x").write_text("escape")


async def test_bad_paths_are_rejected(sandbox, tmp_path):
    with pytest.raises(SandboxError, match=r"must not contain '\.\.'"):
        await sandbox.upload(tmp_path, "/app/../etc")
    with pytest.raises(SandboxError, match="must be absolute"):
        await sandbox.upload(tmp_path, "relative/path")
    with pytest.raises(SandboxError, match="does not exist"):
        await sandbox.upload(tmp_path / "nope", "/app/x")
    with pytest.raises(SandboxError, match="failed"):
        await sandbox.download("/no/such/file", tmp_path / "x")


@pytest.mark.needs_sandbox
async def test_spec_files_are_placed_with_copy_semantics_and_cached(tmp_path):
    env = make_tree(tmp_path / "env")
    cfg = tmp_path / "cfg.ini"
    cfg.write_text("k=v")
    files = [FileCopy(src=env, dst="/app"), FileCopy(src=cfg, dst="/etc/task/")]
    async with LocalSandbox(spec(files=files), scratch_root=tmp_path / "scratch") as sb:
        r = await sb.exec(
            "stat -c '%n %U %a' /app/run.sh /app/sub /etc/task/cfg.ini; echo x > /app/new && echo ok"
        )
        assert r.stdout.splitlines() == [
            "/app/run.sh agent 755",
            "/app/sub agent 755",
            "/etc/task/cfg.ini root 644",
            "ok",
        ]
    async with LocalSandbox(spec(files=files), scratch_root=tmp_path / "scratch") as sb:
        assert (await sb.exec("cat /app/new 2>/dev/null || echo fresh")).stdout == "fresh\n"
    layers = sorted(p.name.split("-")[0] for p in (tmp_path / "scratch" / "layers").iterdir() if p.is_dir())
    assert layers == ["base", "daemon", "files"]  # two trials of one task built the files layer once


@pytest.mark.needs_sandbox
async def test_missing_spec_file_source_names_it(tmp_path):
    sb = LocalSandbox(spec(files=[FileCopy(src=tmp_path / "missing", dst="/app/x")]), scratch_root=tmp_path)
    with pytest.raises(SandboxError, match="missing"):
        await sb.start()
    await sb.stop()
