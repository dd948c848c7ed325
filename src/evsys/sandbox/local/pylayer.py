"""The thin python layer: the host's `/usr` standing in for a `python:3.X` base image (evsys.task.hostbase).

Where the host runs the base's release and has `/usr/bin/python3.X` with its distribution's pip, a sandbox
whose spec names `host_python` gets what the official image has and the host lacks: a `/usr/local` of its own
(the host's is hidden, as the image would not have it) with `python`, `python3`, `python3.X`, `pip`, `pip3`,
`pip3.X` (and `pydoc`, `python3-config` where the host has them) in /usr/local/bin, and
`PIP_BREAK_SYSTEM_PACKAGES=1` in every command's environment, so `pip install` is not refused (PEP 668) and
installs, as root, into /usr/local/lib/python3.X/dist-packages and /usr/local/bin as in the image; the agent
user, who cannot write there, gets pip's user install in its home, as on an image.

That /usr/local is part of the sandbox's overlay (this module's cached lower layer below a fresh upper layer):
writes to it are the sandbox's own and a reset drops them. So /usr is the overlay's directory and each of the
host's /usr entries but `local` is bound read-only over it (`usr_binds`), in place of one bind of /usr.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from evsys.records import SandboxSpec
from evsys.sandbox.local import rootfs

LAYER_VERSION = "1"
ENV = {"PIP_BREAK_SYSTEM_PACKAGES": "1"}
# /usr/local of the official image (and of a Debian install): its directories, all root-owned 0755
USR_LOCAL_DIRS = ("bin", "etc", "games", "include", "lib", "sbin", "share", "src")
PIP_SCRIPT = '#!/bin/sh\nexec /usr/bin/python{version} -m pip "$@"\n'


@functools.cache
def host_usr_entries() -> tuple[tuple[str, str | None], ...]:
    """The host's /usr entries but `local`: (name, symlink target, or None for a directory, bound
    read-only)."""
    entries: list[tuple[str, str | None]] = []
    for entry in sorted(os.scandir("/usr"), key=lambda e: e.name):
        if entry.name == "local":
            continue
        if entry.is_symlink():
            entries.append((entry.name, os.readlink(entry.path)))
        elif entry.is_dir():
            entries.append((entry.name, None))
    return tuple(entries)


def usr_binds() -> list[str]:
    """bwrap arguments binding the host's /usr entries (but `local`) read-only over the overlay's /usr."""
    argv: list[str] = []
    for name, target in host_usr_entries():
        if target is None:
            argv += ["--ro-bind", f"/usr/{name}", f"/usr/{name}"]
    return argv


def commands(version: str) -> dict[str, str | None]:
    """/usr/local/bin of the layer: name -> symlink target, or None for the pip script."""
    links: dict[str, str | None] = dict.fromkeys(("pip", "pip3", f"pip{version}"))
    python = f"/usr/bin/python{version}"
    links |= dict.fromkeys(("python", "python3", f"python{version}"), python)
    extras = {"pydoc": f"/usr/bin/pydoc{version}", "python3-config": f"{python}-config"}
    extras["python-config"] = extras["python3-config"]
    links |= {name: target for name, target in extras.items() if os.path.exists(target)}
    return links


def python_layer(cache: Path, version: str) -> Path:
    """The cached lower layer serving `/usr/bin/python{version}` as a python base image has it."""
    links = commands(version)
    source = f"{LAYER_VERSION}|{version}|{sorted(links.items(), key=str)}|{host_usr_entries()}"
    key = hashlib.sha256(source.encode()).hexdigest()[:16]

    def fill(root: Path) -> None:
        rootfs._mkdir(root, "usr")
        for name, target in host_usr_entries():
            if target is None:
                rootfs._mkdir(root, f"usr/{name}")
            else:
                os.symlink(target, root / "usr" / name)
        for name in (*USR_LOCAL_DIRS, f"lib/python{version}", f"lib/python{version}/dist-packages"):
            rootfs._mkdir(root, f"usr/local/{name}")
        (root / "usr/local/man").symlink_to("share/man")
        bin_dir = root / "usr/local/bin"
        for name, target in links.items():
            if target is not None:
                os.symlink(target, bin_dir / name)
                continue
            (bin_dir / name).write_text(PIP_SCRIPT.format(version=version))
            os.chmod(bin_dir / name, 0o755)

    return rootfs._build(cache / f"python-{key}", fill)


def host_lowers(cache: Path, spec: SandboxSpec, agent_uid: int) -> list[str]:
    """The overlay lower dirs of a sandbox on the host rootfs, topmost first: the spec's files, the thin
    python layer when it names `host_python`, the base layer."""
    public = spec.network != "no-network"
    base = rootfs.base_layer(cache, workdir=spec.workdir, public_network=public, agent_uid=agent_uid)
    files = rootfs.files_layer(cache, spec.files, spec.workdir)
    python = python_layer(cache, spec.host_python) if spec.host_python else None
    return [str(layer) for layer in (files, python, base) if layer is not None]
