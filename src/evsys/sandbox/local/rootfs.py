"""The lower layers of a local sandbox's root filesystem, built once and cached on the host.

* The base layer: the directory skeleton (mount points for the host's read-only system dirs, the workdir,
  /logs/{agent,verifier,artifacts}, /home/agent, /root, /tmp, and an image's usual /var/{log,lib,cache,spool,
  tmp}, /run, /srv, /opt, /mnt, /media) and a minimal generated /etc (passwd, group, hosts, nsswitch.conf,
  ld.so.cache, resolv.conf only with public networking). One per (workdir, network, agent uid): /etc/passwd
  names the sandbox's own agent uid (uids.py).
* The files layer: the spec's `FileCopy` entries with Dockerfile COPY semantics, cached by a fingerprint of
  every source file's path, size, mtime and mode, so many trials of one task copy the files once. Both are
  built in a temporary directory and renamed into place, so concurrent builders never see half a layer.

The agent's files are stored as LAYER_AGENT_UID in every layer; the sandbox mounts idmapped views of the
layers in which they belong to its own agent uid (native/idmap.c), so the files layer is shared by all
sandboxes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from evsys.records import FileCopy
from evsys.sandbox.base import AGENT_LOGS_DIR, ARTIFACTS_DIR, VERIFIER_LOGS_DIR, SandboxError
from evsys.sandbox.local.slirp import DNS_SERVER as SLIRP_DNS
from evsys.sandbox.local.uids import LAYER_AGENT_UID

SANDBOX_PYTHON = "/usr/bin/python3"
AGENT_HOME = "/home/agent"
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Host /etc entries copied into the base layer (CA certificates, alternatives symlinks, loader config, and
# which release this is: a task on the host rootfs in place of its declared base reads it as in the image).
# Copies, not binds: each read-only bind cost bwrap ~0.2 ms of CPU per sandbox (it re-reads the mount table).
ETC_COPIES = (
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "alternatives",
    "ld.so.conf",
    "ld.so.conf.d",
    "ld.so.cache",
    "os-release",
    "debian_version",
)
LAYER_VERSION = "7"
# The directories of a normal image's root that tasks write to (`> /var/log/server.log`, pid files in /run).
SKELETON = (
    *("var/log", "var/lib", "var/cache", "var/spool", "var/tmp"),
    *("run/lock", "srv", "opt", "mnt", "media"),
)

PASSWD = (
    "root:x:0:0:root:/root:/bin/bash\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    f"agent:x:{{uid}}:{{uid}}:agent:{AGENT_HOME}:/bin/bash\n"
)
GROUP = "root:x:0:\nnogroup:x:65534:\nagent:x:{uid}:\n"
HOSTS = "127.0.0.1\tlocalhost evsys\n::1\tlocalhost ip6-localhost ip6-loopback\n"
NSSWITCH = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\n"


@functools.lru_cache(maxsize=4096)  # the same few paths (/logs, /tests, the workdir) come back every trial
def sandbox_path(dst: str) -> PurePosixPath:
    """Validate an absolute in-sandbox path: no '..', no NUL. Returns it normalised."""
    if not dst.startswith("/") or "\0" in dst:
        raise SandboxError(f"sandbox path {dst!r} must be absolute")
    path = PurePosixPath(dst)
    if ".." in path.parts:
        raise SandboxError(f"sandbox path {dst!r} must not contain '..'")
    return path


@functools.cache
def host_system_entries() -> list[tuple[str, str | None]]:
    """Top-level system entries: (name, symlink target, or None for a directory bound read-only)."""
    entries: list[tuple[str, str | None]] = []
    for name in SYSTEM_DIRS:
        host = Path("/") / name
        if host.is_symlink():
            entries.append((name, os.readlink(host)))
        elif host.is_dir():
            entries.append((name, None))
    return entries


@functools.cache
def etc_fingerprint() -> str:
    """The state of the host /etc entries the base layer copies (computed once per process: a new evsys
    process picks up changed certificates or loader config by building a new base layer)."""
    parts = []
    for name in ETC_COPIES:
        path = f"/etc/{name}"
        entries = [path]
        if os.path.isdir(path) and not os.path.islink(path):
            entries += sorted(os.path.join(path, child) for child in os.listdir(path))
        for entry in entries:
            with contextlib.suppress(OSError):
                st = os.lstat(entry)
                parts.append(f"{entry}:{st.st_mtime_ns}:{st.st_size}:{st.st_mode}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _copy_etc(etc: Path) -> None:
    """Copy ETC_COPIES from the host into a layer's etc/ (symlinks kept as links)."""
    for name in ETC_COPIES:
        src, dst = Path("/etc") / name, etc / name
        if not os.path.lexists(src):
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir() and not src.is_symlink():
            shutil.copytree(src, dst, symlinks=True)
        else:
            shutil.copy2(src, dst, follow_symlinks=False)


def _build(final: Path, fill: Callable[[Path], None]) -> Path:
    """Build a layer in a temp dir next to `final` with `fill(tmpdir)` and rename it into place."""
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        os.chmod(tmp, 0o755)
        fill(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _mkdir(root: Path, path: str, mode: int = 0o755, uid: int = 0) -> None:
    target = root / path.lstrip("/")
    target.mkdir(parents=True, exist_ok=True)
    os.chmod(target, mode)
    os.chown(target, uid, uid)


def base_layer(cache: Path, *, workdir: str, public_network: bool, agent_uid: int) -> Path:
    """The skeleton + /etc layer for this workdir, network mode and agent uid (cached)."""
    sandbox_path(workdir)
    source = f"{LAYER_VERSION}|{workdir}|{public_network}|{agent_uid}|{etc_fingerprint()}"
    key = hashlib.sha256(source.encode()).hexdigest()[:16]

    def fill(root: Path) -> None:
        for name, target in host_system_entries():
            if target is None:
                _mkdir(root, name)
            else:
                os.symlink(target, root / name)
        for d in ("proc", "dev", "tmp", "etc", ".evsys", "root", "logs", "home", "tests", "solution"):
            _mkdir(root, d)
        for d in ("tests", "solution"):
            os.rmdir(root / d)
        for d in SKELETON:
            _mkdir(root, d)
        for d in ("var/tmp", "run/lock"):
            os.chmod(root / d, 0o1777)
        _mkdir(root, "/.evsys/daemon")
        _mkdir(root, "/.evsys/jobs", 0o711)
        os.chmod(root / "tmp", 0o1777)
        os.chmod(root / "root", 0o700)
        _mkdir(root, AGENT_HOME, 0o755, LAYER_AGENT_UID)
        _mkdir(root, AGENT_LOGS_DIR, 0o755, LAYER_AGENT_UID)
        _mkdir(root, ARTIFACTS_DIR, 0o755, LAYER_AGENT_UID)
        _mkdir(root, VERIFIER_LOGS_DIR, 0o755, 0)
        _mkdir(root, workdir, 0o755, LAYER_AGENT_UID)
        etc = root / "etc"
        _copy_etc(etc)
        (etc / "passwd").write_text(PASSWD.format(uid=agent_uid))
        (etc / "group").write_text(GROUP.format(uid=agent_uid))
        (etc / "hosts").write_text(HOSTS)
        (etc / "hostname").write_text("evsys\n")
        (etc / "nsswitch.conf").write_text(NSSWITCH)
        (etc / "shadow").write_text("root:*:19000:0:99999:7:::\nagent:*:19000:0:99999:7:::\n")
        os.chmod(etc / "shadow", 0o640)
        if public_network:  # slirp4netns's DNS forwarder, which asks the host's resolvers
            (etc / "resolv.conf").write_text(f"nameserver {SLIRP_DNS}\n")

    return _build(cache / f"base-{key}", fill)


def _fingerprint(files: list[FileCopy], workdir: str) -> str:
    """A hash of every source file's path, size, mtime and mode, plus destinations."""
    h = hashlib.sha256(f"{LAYER_VERSION}|{workdir}".encode())
    for fc in files:
        src = Path(fc.src)
        if not src.exists():
            raise SandboxError(f"sandbox file source {src} does not exist (destination {fc.dst})")
        h.update(f"\0{src.resolve()}\0{fc.dst}\0{'|'.join(fc.exclude)}".encode())
        walk = [src] if not src.is_dir() else [src, *sorted(src.rglob("*"))]
        for p in walk:
            st = p.lstat()
            h.update(f"{p}|{st.st_size}|{st.st_mtime_ns}|{st.st_mode}".encode())
    return h.hexdigest()[:20]


def _place(root: Path, fc: FileCopy, workdir: str) -> None:
    """COPY semantics: a file goes to dst (or into dst/ when dst ends with '/'); a directory's contents merge
    into dst. Files under the workdir belong to the agent user; everything else to root."""
    dst = sandbox_path(fc.dst)
    src = Path(fc.src)
    target = root / str(dst).lstrip("/")
    if src.is_dir():
        excluded = {src / rel for rel in fc.exclude}

        def left_out(directory: str, names: list[str]) -> set[str]:
            return {n for n in names if Path(directory) / n in excluded}

        shutil.copytree(src, target, symlinks=True, dirs_exist_ok=True, ignore=left_out if excluded else None)
    else:
        if fc.dst.endswith("/"):
            target = target / src.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)
    for p in [target, *(target.rglob("*") if target.is_dir() else [])]:
        os.lchown(p, 0, 0)


def files_layer(cache: Path, files: list[FileCopy], workdir: str) -> Path | None:
    """The layer holding the spec's files (cached by fingerprint); None when there are none."""
    if not files:
        return None

    def fill(root: Path) -> None:
        for fc in files:
            _place(root, fc, workdir)
        work = root / workdir.lstrip("/")
        if work.is_dir():
            for p in [work, *work.rglob("*")]:
                os.lchown(p, LAYER_AGENT_UID, LAYER_AGENT_UID)

    return _build(cache / f"files-{_fingerprint(files, workdir)}", fill)
