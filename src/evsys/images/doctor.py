"""`evsys doctor` rows for environment images: the tools, registry reachability, offline bases, the cache."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from evsys.images.bases import UBUNTU_KEYRINGS
from evsys.images.storage import Storage
from evsys.sandbox.local.doctor import Check
from evsys.util.text import tail_words

PROBE_IMAGE = "docker://docker.io/library/debian:bookworm-slim"


def _version(program: str, flag: str = "--version") -> str | None:
    path = shutil.which(program)
    if path is None:
        return None
    done = subprocess.run([path, flag], capture_output=True, text=True, check=False, timeout=30)
    return (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr) else path


def check_tool(program: str, purpose: str) -> Check:
    """An image tool is installed."""
    version = _version(program)
    if version is None:
        return Check(
            program, False, f"not installed: {purpose}", f"apt-get install {program}", required=False
        )
    return Check(program, True, version, required=False)


def check_registry(timeout: float = 15.0) -> Check:
    """Docker Hub answers (otherwise well-known bases are synthesised from package mirrors)."""
    if shutil.which("skopeo") is None:
        return Check("container registry", False, "skopeo missing", "apt-get install skopeo", required=False)
    try:
        done = subprocess.run(
            ["skopeo", "inspect", "--raw", PROBE_IMAGE], capture_output=True, text=True, timeout=timeout
        )
        last_line = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        ok, detail = done.returncode == 0, tail_words(last_line, 200)
    except subprocess.TimeoutExpired:
        ok, detail = False, f"no answer within {timeout:g} s"
    if ok:
        return Check("container registry", True, "docker.io reachable", required=False)
    return Check(
        "container registry",
        False,
        f"docker.io unreachable ({detail}); debian/ubuntu/python bases will be synthesised with mmdebstrap",
        "configure a mirror in /etc/containers/registries.conf, or rely on synthesised bases",
        required=False,
    )


def check_ubuntu_keyring() -> Check:
    """Ubuntu bases, and Pythons built from Ubuntu sources (3.10, 3.12), need Ubuntu's archive keyring."""
    found = next((k for k in UBUNTU_KEYRINGS if Path(k).is_file()), None)
    if found:
        return Check("ubuntu keyring", True, found, required=False)
    return Check(
        "ubuntu keyring",
        False,
        "missing: FROM ubuntu:*, python:3.12 and python:3.10 cannot be synthesised",
        "scripts/bootstrap.sh",
        False,
    )


def check_cache() -> Check:
    """Where images are kept and how much disk they take."""
    storage = Storage()
    size = sum(storage.layer_sizes().values()) if storage.root.exists() else 0
    images = len(storage.images()) if storage.root.exists() else 0
    return Check(
        "image cache", True, f"{images} images, {size / 1e9:.2f} GB in {storage.root}", required=False
    )


def image_checks() -> list[Check]:
    """Every image row, in display order."""
    return [
        check_tool("buildah", "tasks with RUN lines cannot be built"),
        check_tool("skopeo", "docker_image cannot be pulled"),
        check_tool("mmdebstrap", "bases cannot be synthesised offline"),
        check_registry(),
        check_ubuntu_keyring(),
        check_cache(),
    ]
