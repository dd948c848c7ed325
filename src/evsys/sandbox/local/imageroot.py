"""The evsys layer a local sandbox puts on top of an image's own layers.

An image's layers (host directories in overlay format, see evsys.images) are mounted as they are, below one
small cached layer that adds what every evsys sandbox needs: mount points for /proc, /dev, /tmp and the exec
daemon, the /logs tree, the agent's home and the workdir, and an /etc with the image's own users plus the
`agent` user (uid 1000, named first: an image user with that uid keeps its name as an alias), the sandbox's
hosts, hostname and, with public networking, resolv.conf. One layer per (image, workdir, network) triple.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from evsys.records import ImageSpec
from evsys.sandbox.base import AGENT_LOGS_DIR, ARTIFACTS_DIR, VERIFIER_LOGS_DIR
from evsys.sandbox.local import rootfs
from evsys.sandbox.local.slirp import DNS_SERVER as SLIRP_DNS
from evsys.sandbox.local.uids import LAYER_AGENT_UID

LAYER_VERSION = "2"
AGENT = LAYER_AGENT_UID  # the owner of the agent's files on disk (idmapped to each sandbox's uid)


def read_image_file(layers: list[Path], relative: str, limit: int = 1 << 20) -> str | None:
    """A file's text as the merged image shows it (the topmost layer holding it wins; an overlay whiteout
    there means it was deleted), or None."""
    for layer in reversed(layers):
        path = layer / relative
        try:
            st = path.lstat()
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    return None


def _merge_ids(text: str | None, default: str, agent_line: str) -> str:
    """An /etc/passwd or /etc/group: the image's entries plus the agent's, placed right after root so that
    it names uid/gid 1000 even when an image user (ubuntu's `ubuntu`, a `useradd` in a RUN step) has that id
    too (that user keeps working under its own name)."""
    kept = [line for line in (text or default).splitlines() if line.strip() and line.split(":")[0] != "agent"]
    if not any(line.startswith("root:") for line in kept):
        kept.insert(0, default.splitlines()[0])
    at = next(i for i, line in enumerate(kept) if line.startswith("root:")) + 1
    return "\n".join([*kept[:at], agent_line, *kept[at:]]) + "\n"


def _key(image: ImageSpec, workdir: str, public_network: bool, agent_uid: int) -> str:
    layers = "|".join(str(p) for p in image.rootfs_layers)
    source = f"{LAYER_VERSION}|{image.ref}|{layers}|{workdir}|{public_network}|{agent_uid}"
    return hashlib.sha256(source.encode()).hexdigest()[:20]


def image_layer(cache: Path, image: ImageSpec, *, workdir: str, public_network: bool, agent_uid: int) -> Path:
    """The evsys layer over `image` for a sandbox whose agent runs as `agent_uid` (cached)."""
    rootfs.sandbox_path(workdir)
    layers = [Path(p) for p in image.rootfs_layers]
    mkdir = rootfs._mkdir

    def fill(root: Path) -> None:
        for d in ("proc", "dev", "tmp", "etc", ".evsys", "root", "logs", "home"):
            mkdir(root, d)
        mkdir(root, "/.evsys/daemon")
        mkdir(root, "/.evsys/jobs", 0o711)
        os.chmod(root / "tmp", 0o1777)
        os.chmod(root / "root", 0o700)
        mkdir(root, rootfs.AGENT_HOME, 0o755, AGENT)
        mkdir(root, AGENT_LOGS_DIR, 0o755, AGENT)
        mkdir(root, ARTIFACTS_DIR, 0o755, AGENT)
        mkdir(root, VERIFIER_LOGS_DIR, 0o755, 0)
        if not any((layer / workdir.lstrip("/")).is_dir() for layer in layers):
            mkdir(root, workdir, 0o755, AGENT)
        etc = root / "etc"
        passwd = read_image_file(layers, "etc/passwd")
        group = read_image_file(layers, "etc/group")
        agent_pw = f"agent:x:{agent_uid}:{agent_uid}:agent:{rootfs.AGENT_HOME}:/bin/sh"
        default_passwd = rootfs.PASSWD.format(uid=agent_uid)
        default_group = rootfs.GROUP.format(uid=agent_uid)
        (etc / "passwd").write_text(_merge_ids(passwd, default_passwd, agent_pw))
        (etc / "group").write_text(_merge_ids(group, default_group, f"agent:x:{agent_uid}:"))
        (etc / "hosts").write_text(rootfs.HOSTS)
        (etc / "hostname").write_text("evsys\n")
        if public_network:
            (etc / "resolv.conf").write_text(f"nameserver {SLIRP_DNS}\n")

    return rootfs._build(cache / f"image-{_key(image, workdir, public_network, agent_uid)}", fill)


def lower_layers(
    cache: Path, image: ImageSpec, *, workdir: str, public_network: bool, agent_uid: int
) -> list[str]:
    """The overlay lower dirs of a sandbox on `image`, topmost first: evsys's layer, then the image's (marked
    with a leading "=": not idmapped)."""
    for layer in image.rootfs_layers:
        if not Path(layer).is_dir():
            raise FileNotFoundError(f"layer {layer} of image {image.ref} is missing (was it pruned?)")
    top = image_layer(cache, image, workdir=workdir, public_network=public_network, agent_uid=agent_uid)
    # "=": the daemon mounts the image's own layers as they are (not idmapped, see native/idmap.c), so every
    # uid in the image keeps its owner; evsys's layer above them shows the agent's files as the sandbox's uid
    return [str(top), *(f"={p}" for p in reversed(image.rootfs_layers))]
