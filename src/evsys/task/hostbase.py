"""What a well-known base image provides, and whether the host's root filesystem provides the same.

The local sandbox can run a task whose Dockerfile is only `FROM <base>` plus WORKDIR/ENV/COPY on the host's
own `/usr` instead of an image, but only where that is provably the same thing for the task: the host runs
the distribution release the base names (`/usr/lib/os-release` against `debian:bookworm`, `ubuntu:24.04`,
`python:3.13-slim-bookworm` -> Debian 12), and for a `python` base, a `python` command of the same
major.minor and a pip that installs as in the image (no PEP 668 `EXTERNALLY-MANAGED` marker). Any other base
(alpine, busybox, a release or Python the host does not have, a base evsys cannot tell) needs its image:
pulled, built or synthesised.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

# Debian releases: codename -> (number, python3 minor version)
DEBIAN = {
    "bullseye": ("11", "3.9"),
    "bookworm": ("12", "3.11"),
    "trixie": ("13", "3.13"),
}
# Ubuntu releases: version -> (codename, python3 minor version)
UBUNTU = {
    "20.04": ("focal", "3.8"),
    "22.04": ("jammy", "3.10"),
    "24.04": ("noble", "3.12"),
}
_TBENCH = re.compile(r"^ghcr\.io/laude-institute/t-bench/(ubuntu|python)-(\d+)-(\d+)$")
_PYTHON_TAG = re.compile(r"(3\.\d+)(?:\.\d+)?(?:-slim)?(?:-([a-z]+))?")


@dataclass(frozen=True)
class BaseNeeds:
    """What a base image provides that a task may rely on: its distribution release (None: any release of
    the distribution) and, for a python base, the Python version behind `python` and `pip`."""

    distribution: str
    release: str | None
    python: str | None = None

    def describe(self) -> str:
        """`Debian 12 with python 3.13` and the like."""
        what = f"{self.distribution.capitalize()} {self.release or '(any release)'}"
        return f"{what} with python {self.python}" if self.python else what


@dataclass(frozen=True)
class HostFacts:
    """The host root filesystem as a local sandbox sees it (its /usr)."""

    distribution: str
    release: str
    python: str | None  # major.minor of the `python` command on /usr, None when there is none
    pip_usable: bool  # a `pip` command that installs without a PEP 668 refusal

    @classmethod
    def of_root(cls, root: Path = Path("/")) -> HostFacts:
        """Read the facts of the root filesystem at `root`."""
        fields = _os_release(root)
        python = _python_version(root)
        pip = any((root / d / "pip").exists() for d in ("usr/local/bin", "usr/bin"))
        stdlibs = (f"usr/lib/python{python}", f"usr/local/lib/python{python}")
        marker = any((root / lib / "EXTERNALLY-MANAGED").exists() for lib in stdlibs)
        usable = pip and python is not None and not marker
        return cls(fields.get("ID", ""), fields.get("VERSION_ID", ""), python, usable)

    def describe(self) -> str:
        """`Debian 12, python 3.11, pip refused (PEP 668)` and the like."""
        python = f"python {self.python}" if self.python else "no python command"
        pip = "pip usable" if self.pip_usable else "no usable pip (missing or PEP 668)"
        return f"{self.distribution.capitalize()} {self.release}, {python}, {pip}"


def _os_release(root: Path) -> dict[str, str]:
    for path in ("etc/os-release", "usr/lib/os-release"):
        try:
            text = (root / path).read_text()
        except OSError:
            continue
        pairs = (line.partition("=") for line in text.splitlines() if "=" in line)
        return {key.strip(): value.strip().strip("\"'") for key, _, value in pairs}
    return {}


def _python_version(root: Path) -> str | None:
    """The major.minor of the `python` command on the root's /usr, from the file it resolves to."""
    for directory in ("usr/local/bin", "usr/bin"):
        path = root / directory / "python"
        if not path.exists():
            continue
        match = re.fullmatch(r"python(3\.\d+)", path.resolve().name)
        return match.group(1) if match else None
    return None


@functools.cache
def host_facts() -> HostFacts:
    """The facts of this host's root filesystem (read once per process)."""
    return HostFacts.of_root()


def _official(image: str) -> tuple[str, str]:
    """(repository without registry/library prefix, tag) of an image reference; tag "latest" when none."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else "latest"
    name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    for prefix in ("docker.io/", "library/"):
        name = name.removeprefix(prefix)
    return name, tag


def base_needs(image: str) -> BaseNeeds | None:
    """What `image` provides, for the well-known Debian, Ubuntu, Python and Terminal-Bench bases; None for
    any other image (evsys cannot say what it provides)."""
    name, tag = _official(image)
    tbench = _TBENCH.match(name)
    if tbench:
        version = f"{tbench.group(2)}.{tbench.group(3)}"
        if tbench.group(1) == "ubuntu":
            return BaseNeeds("ubuntu", version) if version in UBUNTU else None
        return BaseNeeds("debian", None, version)
    if name == "debian":
        word = re.split(r"[-.]", tag, maxsplit=1)[0]
        number = next((n for c, (n, _) in DEBIAN.items() if word in (c, n)), None)
        return BaseNeeds("debian", number) if number else None
    if name == "ubuntu":
        release = next((v for v, (c, _) in UBUNTU.items() if tag in (v, c)), None)
        return BaseNeeds("ubuntu", release) if release else None
    if name == "python":
        match = _PYTHON_TAG.fullmatch(tag)
        if match is None or (match.group(2) and match.group(2) not in DEBIAN):
            return None
        release = DEBIAN[match.group(2)][0] if match.group(2) else None
        return BaseNeeds("debian", release, match.group(1))
    return None


def host_mismatch(image: str, host: HostFacts | None = None) -> str | None:
    """None when the host's root filesystem provides what `image` provides for a task; else why not."""
    needs = base_needs(image)
    if needs is None:
        return f"evsys cannot tell what {image} provides"
    host = host or host_facts()
    release_ok = needs.release is None or needs.release == host.release
    if needs.distribution != host.distribution or not release_ok:
        return f"{image} is {needs.describe()}, the host {host.distribution.capitalize()} {host.release}"
    if needs.python and (needs.python != host.python or not host.pip_usable):
        return f"{image} is {needs.describe()}, the host {host.describe()}"
    return None
