"""Whether the host's root filesystem stands in for a task's base: read from a root's files, decided on the
distribution release, the `python` command's version and whether pip installs (PEP 668), or, with the thin
python layer, on a /usr/bin/python3.X that imports the distribution's pip."""

from __future__ import annotations

from pathlib import Path

import pytest

from evsys.task.hostbase import BaseNeeds, HostFacts, StandIn, base_needs, host_mismatch, host_stand_in


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


def _debian_12(tmp_path: Path, *, stdlib: bool = True, pip_module: bool = True, venv: bool = True) -> Path:
    """A root like this Debian 12 host: python3.11 in /usr/bin, no `python`, PEP 668's marker, python3-pip,
    python3.11-venv."""
    root = _root(tmp_path, release="12", python=None, managed=False, pip=True)
    (root / "usr/bin/python3.11").write_text("")
    (root / "usr/lib/python3.11").mkdir()
    (root / "usr/lib/python3.11/EXTERNALLY-MANAGED").write_text("[externally-managed]\n")
    if stdlib:
        (root / "usr/lib/python3.11/os.py").write_text("")
    if venv:
        (root / "usr/lib/python3.11/ensurepip").mkdir()
        (root / "usr/lib/python3.11/ensurepip/__main__.py").write_text("")
    if pip_module:
        (root / "usr/lib/python3/dist-packages/pip").mkdir(parents=True)
        (root / "usr/lib/python3/dist-packages/pip/__init__.py").write_text("")
    return root


def test_a_distribution_python_with_its_pip_stands_in_for_the_python_base_with_the_thin_layer(tmp_path):
    host = HostFacts.of_root(_debian_12(tmp_path))
    assert (host.python, host.pip_usable, host.layer_pythons) == (None, False, ("3.11",))
    layered = StandIn("host:debian-12+python3.11", "3.11")
    assert host_stand_in("python:3.11-slim-bookworm", host) == layered
    assert host_stand_in("python:3.11-slim", host) == layered
    assert host_mismatch("python:3.11-slim-bookworm", host) is None
    assert host_stand_in("debian:bookworm-slim", host) == StandIn("host:debian-12")  # no layer: no python
    # what the host does not have is still not stood in for
    assert host_stand_in("python:3.13-slim-bookworm", host) is None
    assert "python 3.13" in (host_mismatch("python:3.13-slim-bookworm", host) or "")
    assert host_stand_in("python:3.11-slim-trixie", host) is None
    assert host_stand_in("ubuntu:24.04", host) is None


@pytest.mark.parametrize("missing", ["stdlib", "pip_module", "venv"])
def test_no_layer_without_the_pip_module_venv_or_the_standard_library(tmp_path, missing):
    host = HostFacts.of_root(_debian_12(tmp_path, **{missing: False}))
    assert host.layer_pythons == ()
    assert host_stand_in("python:3.11-slim-bookworm", host) is None
    reason = host_mismatch("python:3.11-slim-bookworm", host) or ""
    assert "no /usr/bin/python3.X with pip and venv" in reason
