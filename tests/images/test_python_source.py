"""A `python:3.X` base whose Python the named Debian release does not package keeps that release's userland:
Python 3.X is compiled from the `python3.X` source package of the archive that carries it (python 3.12:
Ubuntu noble's), fetched through that archive's signed deb-src index."""

from __future__ import annotations

from pathlib import Path

import pytest

from evsys.images import ImageError, bases, parse_ref, synthesis_plan
from evsys.images.refs import SynthesisPlan


def _plan(text: str) -> SynthesisPlan:
    plan = synthesis_plan(parse_ref(text))
    assert plan is not None
    return plan


@pytest.mark.parametrize(
    ("text", "suite", "source"),
    [
        ("python:3.12-slim-bookworm", "bookworm", ("ubuntu", "noble")),
        ("python:3.12-slim", "trixie", ("ubuntu", "noble")),  # today's official python:3.12-slim is trixie
        ("python:3.12", "trixie", ("ubuntu", "noble")),
        ("python:3.13-slim-bookworm", "bookworm", ("debian", "trixie")),
    ],
)
def test_python_is_built_from_the_archive_that_carries_it_on_the_named_debian_release(text, suite, source):
    plan = _plan(text)
    assert (plan.distribution, plan.suite) == ("debian", suite)
    assert (plan.source_distribution, plan.python_source) == source
    assert bases.recipe(plan) == "python-source"
    assert f"built from {source[0] + ' ' if source[0] == 'ubuntu' else ''}{source[1]}'s source" in (
        plan.describe()
    )


def test_an_ubuntu_source_is_verified_with_the_hosts_ubuntu_keyring(tmp_path, monkeypatch):
    keyring = tmp_path / "ubuntu-archive-keyring.gpg"
    keyring.write_bytes(b"keyring")
    monkeypatch.setattr(bases, "UBUNTU_KEYRINGS", (str(keyring),))
    plan = _plan("python:3.12-slim-bookworm")
    dockerfile = bases.source_python_dockerfile("localhost/evsys/synth/debian:bookworm", plan)
    assert bases.source_context(plan) == {bases.SOURCE_KEYRING: keyring}
    copied = f"/usr/share/keyrings/{bases.SOURCE_KEYRING}"
    assert f"COPY {bases.SOURCE_KEYRING} {copied}\n" in dockerfile
    mirror = bases.host_mirror("ubuntu")
    assert f"deb-src [signed-by={copied}] {mirror} noble main" in dockerfile
    assert "apt-get source --download-only python3.12 " in dockerfile
    assert dockerfile.index("COPY") < dockerfile.index(
        "RUN"
    )  # the keyring is there before apt reads the index


def test_a_debian_source_needs_no_copied_keyring():
    plan = _plan("python:3.13-slim-bookworm")
    dockerfile = bases.source_python_dockerfile("base", plan)
    assert bases.source_context(plan) == {}
    assert "COPY" not in dockerfile
    assert f"deb-src [signed-by={bases.KEYRING}] {bases.host_mirror('debian')} trixie main" in dockerfile


def test_without_the_ubuntu_keyring_the_base_is_refused_saying_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setattr(bases, "UBUNTU_KEYRINGS", (str(tmp_path / "absent.gpg"),))
    with pytest.raises(ImageError, match=r"Ubuntu's archive keyring .*scripts/bootstrap.sh"):
        bases.source_context(_plan("python:3.12-slim-bookworm"))
    assert not Path(tmp_path / "absent.gpg").exists()
