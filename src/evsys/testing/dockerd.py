"""A private Docker daemon for tests and benchmarks: Debian's `dockerd` on its own socket, data root and
containerd namespace, without the shared `docker0` bridge or host firewall rules (so several such daemons run
side by side), plus a Debian base image synthesised with mmdebstrap from the host's package mirror (no
container registry needed), cached as a tarball under evsys's cache dir.

`PrivateDockerd.start()` raises `DockerdUnavailable` with the reason when the daemon cannot start here;
`stop()` stops it by pid, waits for it, and removes the network, mounts and directories it leaves. With
`nat=True` (benchmarks that need a route out) docker adds its own NAT rules to the host's firewall for the
networks it creates; tests never ask for it."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

BASE_REF = "evsys-test/debian:bookworm"
NETWORK = "evsys-test"  # the daemon's network for `public` sandboxes (its own bridge interface)
START_TIMEOUT_SEC = 60.0


class DockerdUnavailable(RuntimeError):
    """The private daemon (or the base image it needs) cannot be had on this machine; the message says why."""


def cache_dir() -> Path:
    """Where base tarballs are kept across runs: `<evsys cache>/test-bases`."""
    return Path(os.environ.get("EVSYS_CACHE_DIR") or Path.home() / ".cache" / "evsys") / "test-bases"


def base_tarball(name: str = "debian-bookworm-minbase", include: tuple[str, ...] = ()) -> Path:
    """A Debian bookworm minbase root filesystem (plus the packages of `include`) as a tar, made once with
    mmdebstrap and kept under evsys's cache dir as `<name>.tar`."""
    target = cache_dir() / f"{name}.tar"
    if target.is_file():
        return target
    if shutil.which("mmdebstrap") is None:
        raise DockerdUnavailable("mmdebstrap is not installed (scripts/bootstrap.sh installs it)")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial.tar")
    command = ["mmdebstrap", "--quiet", "--variant=minbase"]
    command += [f"--include={','.join(include)}"] if include else []
    command += ["bookworm", str(partial), "http://deb.debian.org/debian"]
    subprocess.run(command, check=True, timeout=900, stdin=subprocess.DEVNULL)
    partial.rename(target)
    return target


class PrivateDockerd:
    """One dockerd of our own (see the module docstring); `host` is its `unix://` address once started."""

    def __init__(self, *, nat: bool = False) -> None:
        self.nat = nat  # let docker add NAT rules, so containers on its networks reach the internet
        self.root = Path(tempfile.mkdtemp(prefix="evsys-dockerd-", dir="/tmp"))
        self.host = f"unix://{self.root / 'docker.sock'}"
        self.proc: subprocess.Popen | None = None

    def docker(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run the docker CLI against this daemon."""
        return subprocess.run(["docker", "-H", self.host, *args], check=check, capture_output=True)

    def start(self) -> str:
        """Start the daemon and create its network; return its address."""
        if shutil.which("dockerd") is None:
            raise DockerdUnavailable("dockerd is not installed (Debian's docker.io; scripts/bootstrap.sh)")
        log = (self.root / "dockerd.log").open("wb")
        # containerd names allow letters and digits joined by single . _ -: a temporary directory's random
        # part (letters, digits, `_`) may end in `_`, which containerd refuses when a container starts
        name = f"evsys-dockerd-{secrets.token_hex(6)}"
        command = [
            "dockerd",
            f"--host={self.host}",
            f"--data-root={self.root / 'data'}",
            f"--exec-root={self.root / 'exec'}",
            f"--pidfile={self.root / 'dockerd.pid'}",
            f"--containerd-namespace={name}",
            f"--containerd-plugins-namespace={name}-plugins",
            "--bridge=none",
            f"--iptables={'true' if self.nat else 'false'}",
        ]
        self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_SEC
        while not (self.root / "docker.sock").exists() or self.docker("version", check=False).returncode:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.root / "dockerd.log").read_text(errors="replace")[-2000:]
                self.stop()
                raise DockerdUnavailable(f"dockerd could not start here: {tail}")
            time.sleep(0.2)
        self.docker("network", "create", NETWORK)
        return self.host

    def import_base(self, ref: str = BASE_REF, tarball: Path | None = None) -> str:
        """Import a base tarball (default: the Debian minbase) into the daemon as `ref`."""
        self.docker("import", str(tarball or base_tarball()), ref)
        return ref

    def stop(self) -> None:
        """Stop the daemon by pid and remove what it leaves (network bridge, mounts, directories)."""
        if self.proc is not None:
            self.docker("network", "rm", NETWORK, check=False)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            self.proc = None
        for mount in reversed(Path("/proc/self/mounts").read_text().splitlines()):
            point = mount.split()[1]
            if point.startswith(str(self.root)):
                subprocess.run(["umount", "-l", point], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)
