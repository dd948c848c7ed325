"""environment/.dockerignore: what `COPY` leaves out, as `docker build` would, down to the sandbox's files."""

from __future__ import annotations

from pathlib import Path

import pytest

from evsys.records import SandboxSpec
from evsys.sandbox import LocalSandbox
from evsys.task import parse_dockerfile
from evsys.task.dockerignore import DockerIgnore

IGNORE = "# build junk\n*.log\n!keep.log\n/secrets\ndata/**/*.bin\n[ab].tmp\n"
FILES = {
    "app.py": "print('hi')\n",
    "debug.log": "noise\n",
    "keep.log": "kept\n",
    "secrets/token": "s3cr3t\n",
    "data/x.csv": "1,2\n",
    "data/deep/er/blob.bin": "bin\n",
    "data/top.bin": "bin\n",
    "a.tmp": "t\n",
    "c.tmp": "t\n",
    "sub/debug.log": "nested logs are not matched by *.log\n",
}


def _context(tmp_path: Path, ignore: str = IGNORE) -> Path:
    context = tmp_path / "environment"
    for relative, text in {**FILES, ".dockerignore": ignore}.items():
        path = context / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return context


def test_patterns_follow_docker_semantics():
    ignore = DockerIgnore(IGNORE.splitlines())
    assert ignore.ignored("debug.log") and not ignore.ignored("keep.log")
    assert not ignore.ignored("sub/debug.log")  # `*` stays within one path segment
    assert ignore.ignored("secrets") and ignore.ignored("secrets/token")  # a directory takes its contents
    assert ignore.ignored("data/top.bin") and ignore.ignored("data/deep/er/blob.bin")  # `**/` spans 0+ dirs
    assert not ignore.ignored("data/x.csv")
    assert ignore.ignored("a.tmp") and not ignore.ignored("c.tmp")
    assert not DockerIgnore([]).ignored("anything") and not DockerIgnore(["# only a comment"]).ignored("x")
    reinclude = DockerIgnore(["logs", "!logs/keep"])
    assert reinclude.ignored("logs/other") and not reinclude.ignored("logs/keep")


def test_copy_of_the_context_leaves_out_ignored_paths(tmp_path):
    context = _context(tmp_path)
    env, problems = parse_dockerfile("FROM ubuntu\nWORKDIR /app\nCOPY . .\n", context)
    assert problems == []
    [copy] = env.files
    assert copy.dst == "/app" and set(copy.exclude) == {
        "debug.log",
        "secrets",
        "data/deep/er/blob.bin",
        "data/top.bin",
        "a.tmp",
    }


def test_copying_an_ignored_file_by_name_is_an_error_naming_the_line(tmp_path):
    context = _context(tmp_path)
    _, problems = parse_dockerfile("FROM ubuntu\nCOPY app.py /app/\nCOPY secrets/token /app/\n", context)
    assert [(p.field, p.message) for p in problems] == [
        ("3", "COPY source 'secrets/token' is excluded by environment/.dockerignore")
    ]
    env, problems = parse_dockerfile("FROM ubuntu\nCOPY *.log /app/logs/\n", context)
    assert problems == [] and [c.src.name for c in env.files] == ["keep.log"]  # globs skip ignored matches


@pytest.mark.needs_sandbox
@pytest.mark.parametrize("reuse", [False, True])
async def test_the_sandbox_gets_exactly_the_files_docker_would_copy(tmp_path, reuse):
    context = _context(tmp_path)
    env, _ = parse_dockerfile("FROM ubuntu\nWORKDIR /app\nCOPY . .\n", context)
    sb = LocalSandbox(SandboxSpec(name=f"dockerignore-{tmp_path.name}"[:60], files=env.files))
    await sb.start()
    try:
        if reuse:
            await sb.reset()  # the files layer is a lower layer: a reset sandbox has the same files
        listing = await sb.exec("cd /app && find . -type f | sort")
    finally:
        await sb.stop()
    assert listing.stdout.split() == [
        "./.dockerignore",
        "./app.py",
        "./c.tmp",
        "./data/x.csv",
        "./keep.log",
        "./sub/debug.log",
    ]
