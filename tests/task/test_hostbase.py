"""Whether the host's root filesystem stands in for a task's base: read from a root's files, decided on the
distribution release, the `python` command's version and whether pip installs (PEP 668)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evsys.task.hostbase import BaseNeeds, HostFacts, base_needs, host_mismatch


def _root(tmp_path: Path, *, release: str, python: str | None, managed: bool, pip: bool) -> Path:
    (tmp_path / "usr/lib").mkdir(parents=True)
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/lib/os-release").write_text(f'ID=debian\nVERSION_ID="{release}"\n')
    if python:
        (tmp_path / f"usr/bin/python{python}").write_text("")
        (tmp_path / "usr/bin/python").symlink_to(f"python{python}")
        (tmp_path / f"usr/lib/python{python}").mkdir()
        if managed:
            (tmp_path / f"usr/lib/python{python}/EXTERNALLY-MANAGED").write_text("[externally-managed]\n")
    if pip:
        (tmp_path / "usr/bin/pip").write_text("")
    return tmp_path


def test_a_root_like_the_official_python_image_stands_in_for_it(tmp_path):
    host = HostFacts.of_root(_root(tmp_path, release="12", python="3.13", managed=False, pip=True))
    assert host == HostFacts("debian", "12", "3.13", pip_usable=True)
    assert host_mismatch("python:3.13-slim-bookworm", host) is None
    assert host_mismatch("python:3.13-slim", host) is None  # no release named: the Python decides
    assert host_mismatch("debian:bookworm-slim", host) is None


@pytest.mark.parametrize(
    ("python", "managed", "pip", "why"),
    [
        (None, False, True, "no python command"),
        ("3.11", False, True, "python 3.11"),
        ("3.13", True, True, "no usable pip"),  # PEP 668: `pip install` is refused
        ("3.13", False, False, "no usable pip"),
    ],
)
def test_a_root_without_the_named_python_or_a_usable_pip_does_not(tmp_path, python, managed, pip, why):
    host = HostFacts.of_root(_root(tmp_path, release="12", python=python, managed=managed, pip=pip))
    reason = host_mismatch("python:3.13-slim-bookworm", host)
    assert reason is not None and why in reason and "Debian 12 with python 3.13" in reason
    assert host_mismatch("debian:12", host) is None  # the plain release still matches


def test_another_release_or_an_unknown_base_never_runs_on_the_host(tmp_path):
    host = HostFacts.of_root(_root(tmp_path, release="12", python="3.13", managed=False, pip=True))
    assert "Debian 13" in (host_mismatch("python:3.13-slim-trixie", host) or "")
    assert "Ubuntu 24.04" in (host_mismatch("ubuntu:noble", host) or "")
    assert "cannot tell" in (host_mismatch("busybox", host) or "")
    assert "cannot tell" in (host_mismatch("debian:latest", host) or "")


def test_what_the_well_known_bases_provide():
    assert base_needs("docker.io/library/python:3.13.2-slim-bookworm") == BaseNeeds("debian", "12", "3.13")
    assert base_needs("ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624") == BaseNeeds("ubuntu", "24.04")
    assert base_needs("ghcr.io/laude-institute/t-bench/python-3-13:1") == BaseNeeds("debian", None, "3.13")
    assert base_needs("debian:bookworm-20240110-slim") == BaseNeeds("debian", "12")
    assert base_needs("nvidia/cuda:12.0-base") is None
