"""Image references as Docker reads them, the bases evsys can synthesise, the host's mirrors, and bad
references named with their file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from evsys.images import ImageError, ImageService, Storage, parse_ref, synthesis_plan
from evsys.images.bases import host_mirror
from evsys.images.refs import ImageRefError


@pytest.mark.parametrize(
    ("text", "full"),
    [
        ("debian:bookworm-slim", "docker.io/library/debian:bookworm-slim"),
        ("ubuntu", "docker.io/library/ubuntu:latest"),
        ("org/tool:1.2", "docker.io/org/tool:1.2"),
        (
            "ghcr.io/laude-institute/t-bench/python-3-13:20250620",
            "ghcr.io/laude-institute/t-bench/python-3-13:20250620",
        ),
        ("localhost:5000/x/y", "localhost:5000/x/y:latest"),
        ("python@sha256:" + "a" * 64, "docker.io/library/python@sha256:" + "a" * 64),
    ],
)
def test_references_are_qualified_like_docker_does(text, full):
    assert str(parse_ref(text)) == full


@pytest.mark.parametrize("text", ["UPPER/case", "x:bad tag", "x@sha256:short", ""])
def test_bad_references_are_refused(text):
    with pytest.raises(ImageRefError):
        parse_ref(text)


@pytest.mark.parametrize(
    ("text", "plan"),
    [
        ("debian:bookworm-slim", ("debian", "bookworm", None)),
        ("debian:13.0-slim", ("debian", "trixie", None)),
        ("debian:bullseye-slim", ("debian", "bullseye", None)),
        ("ubuntu:24.04", ("ubuntu", "noble", None)),
        ("python:3.11-slim", ("debian", "bookworm", "3.11")),
        ("python:3.11-slim-bookworm", ("debian", "bookworm", "3.11")),
        ("python:3.13-slim-bookworm", ("debian", "bookworm", "3.13")),  # trixie's 3.13 built on bookworm
        ("python:3.13-slim", ("debian", "trixie", "3.13")),
        ("python:3.12", ("debian", "trixie", "3.12")),  # the official image's release; noble's 3.12 on it
        ("python:3.12-slim", ("debian", "trixie", "3.12")),
        ("python:3.8", ("ubuntu", "focal", "3.8")),  # no Debian release or OpenSSL 3 build serves it
        ("python:3.11.9-slim", ("debian", "bookworm", "3.11")),
        ("python:3.14-slim", None),
        ("alpine:3.22", None),
        ("ghcr.io/org/debian:12", None),
        ("public.ecr.aws/docker/library/python:3.12-slim-bookworm", ("debian", "bookworm", "3.12")),
        ("python:3.13-slim-bookworm@sha256:" + "a" * 64, ("debian", "bookworm", "3.13")),
        ("python@sha256:" + "a" * 64, None),
        ("ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624", ("ubuntu", "noble", None)),
        ("ghcr.io/laude-institute/t-bench/python-3-13:20250620", ("debian", "trixie", "3.13")),
    ],
)
def test_which_bases_can_be_synthesised(text, plan):
    got = synthesis_plan(parse_ref(text))
    assert (None if got is None else (got.distribution, got.suite, got.python)) == plan


def test_the_mirror_comes_from_the_hosts_apt_config(tmp_path):
    deb822 = tmp_path / "debian.sources"
    deb822.write_text("Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n")
    one_line = tmp_path / "sources.list"
    one_line.write_text("deb [arch=amd64] http://other.example/ubuntu noble main\n")
    assert host_mirror("debian", [deb822, one_line]) == "http://mirror.example/debian"
    assert host_mirror("ubuntu", [deb822, one_line]) == "http://other.example/ubuntu"
    assert host_mirror("ubuntu", [deb822]) == "http://archive.ubuntu.com/ubuntu"


async def test_a_bad_docker_image_names_the_field(tmp_path: Path):
    service = ImageService(Storage(tmp_path / "images"), pull_policy="never")
    with pytest.raises(ImageError, match=r"task.toml:environment.docker_image: .*'Bad/Name'"):
        await service.task_image(tmp_path, docker_image="Bad/Name:1")


def test_uv_tool_images_are_synthesised_from_the_pypi_wheel_of_their_version():
    from evsys.images.toolimages import tool_image_plan

    plan = tool_image_plan(parse_ref("ghcr.io/astral-sh/uv:0.9.7"))
    assert plan is not None and plan.version == "0.9.7" and "uv==0.9.7 wheel from PyPI" in plan.describe()
    assert tool_image_plan(parse_ref("ghcr.io/astral-sh/uv:0.9.7-python3.12-bookworm")) is None  # whole image
    assert tool_image_plan(parse_ref("ghcr.io/astral-sh/uv:latest")) is None  # no version to pin
    assert tool_image_plan(parse_ref("docker.io/astral/uv:0.9.7")) is None
