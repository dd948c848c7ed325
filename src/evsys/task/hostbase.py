"""What a well-known base image provides, and whether the host's root filesystem provides the same.

The local sandbox can run a task whose Dockerfile is only `FROM <base>` plus WORKDIR/ENV/COPY on the host's
own `/usr` instead of an image, but only where that is provably the same thing for the task: the host runs
the distribution release the base names (`/usr/lib/os-release` against `debian:bookworm`, `ubuntu:24.04`,
`python:3.13-slim-bookworm` -> Debian 12), and for a `python` base, Python of the same major.minor with pip.
Either the host has it as the image does (a `python` command, a pip without a PEP 668 marker), or it has it as
its distribution ships it (`/usr/bin/python3.X`, Debian's pip module and venv) and the local sandbox adds
the thin python layer (sandbox/local/pylayer.py: `python`, `pip`... in a /usr/local of the sandbox's own, and
pip installing there as in the image). Any other base (alpine, busybox, a release or Python the host does not
have, a base evsys cannot tell) needs its image: pulled, built or synthesised.
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
    # major.minor of each /usr/bin/python3.X that imports pip from the distribution's own packages and has
    # venv's ensurepip (Debian's python3.X-venv): what the thin python layer can serve
    layer_pythons: tuple[str, ...] = ()

    @classmethod
    def of_root(cls, root: Path = Path("/")) -> HostFacts:
        """Read the facts of the root filesystem at `root`."""
        fields = _os_release(root)
        python = _python_version(root)
        pip = any((root / d / "pip").exists() for d in ("usr/local/bin", "usr/bin"))
        stdlibs = (f"usr/lib/python{python}", f"usr/local/lib/python{python}")
        marker = any((root / lib / "EXTERNALLY-MANAGED").exists() for lib in stdlibs)
        usable = pip and python is not None and not marker
        release = fields.get("VERSION_ID", "")
        return cls(fields.get("ID", ""), release, python, usable, _layer_pythons(root))

    def describe(self) -> str:
        """`Debian 12, python 3.11, pip refused (PEP 668)` and the like."""
        python = f"python {self.python}" if self.python else "no python command"
        pip = "pip usable" if self.pip_usable else "no usable pip (missing or PEP 668)"
        layer = ", ".join(f"/usr/bin/python{v} with pip and venv" for v in self.layer_pythons)
        layer = layer or "no /usr/bin/python3.X with pip and venv"
        return f"{self.distribution.capitalize()} {self.release}, {python}, {pip}, {layer}"

    def name(self, python_layer: str | None = None) -> str:
        """What a trial on this host's rootfs ran on: `host:debian-12+python3.11` and the like."""
        name = f"host:{self.distribution}-{self.release}"
        return f"{name}+python{python_layer}" if python_layer else name


@dataclass(frozen=True)
class StandIn:
    """How the host's root filesystem stands in for a base: its name in records, and the major.minor of the
    thin python layer the local sandbox adds (None: the host provides the base as it is)."""

    name: str
    python_layer: str | None = None


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


def _layer_pythons(root: Path) -> tuple[str, ...]:
    """The /usr/bin/python3.X of the root with its standard library, venv's ensurepip (python3.X-venv) and a
    pip module it imports from the distribution's packages (python3-pip: /usr/lib/python3/dist-packages/pip),
    as `python -m venv` and `pip` work in the official image."""
    found = []
    for path in sorted((root / "usr/bin").glob("python3.*")):
        match = re.fullmatch(r"python(3\.\d+)", path.name)
        stdlib = root / "usr/lib" / path.name
        if match is None or not all((stdlib / f).is_file() for f in ("os.py", "ensurepip/__main__.py")):
            continue
        pips = ("usr/lib/python3/dist-packages/pip", f"usr/lib/{path.name}/dist-packages/pip")
        if any((root / pip / "__init__.py").is_file() for pip in pips):
            found.append(match.group(1))
    return tuple(found)


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


def _judge(image: str, host: HostFacts | None) -> StandIn | str:
    """How the host's rootfs stands in for `image`, else why it cannot."""
    needs = base_needs(image)
    if needs is None:
        return f"evsys cannot tell what {image} provides"
    host = host or host_facts()
    release_ok = needs.release is None or needs.release == host.release
    if needs.distribution != host.distribution or not release_ok:
        return f"{image} is {needs.describe()}, the host {host.distribution.capitalize()} {host.release}"
    if needs.python is None or (needs.python == host.python and host.pip_usable):
        return StandIn(host.name())
    if needs.python in host.layer_pythons:
        return StandIn(host.name(needs.python), needs.python)
    return f"{image} is {needs.describe()}, the host {host.describe()}"


def host_stand_in(image: str, host: HostFacts | None = None) -> StandIn | None:
    """How the host's root filesystem provides what `image` provides for a task (as it is, or with the thin
    python layer); None when it does not."""
    judged = _judge(image, host)
    return judged if isinstance(judged, StandIn) else None


def host_mismatch(image: str, host: HostFacts | None = None) -> str | None:
    """None when the host's root filesystem provides what `image` provides for a task; else why not."""
    judged = _judge(image, host)
    return None if isinstance(judged, StandIn) else judged
