"""Image references: Docker's short names made fully qualified, and the bases evsys can synthesise offline.

`debian:bookworm-slim` is `docker.io/library/debian:bookworm-slim`; `ghcr.io/org/img` gets the tag `latest`;
a digest (`name@sha256:...`) is kept as given. `synthesis_plan` maps the well-known Debian, Ubuntu and Python
bases onto a distribution release mmdebstrap can build from package mirrors.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from evsys.task.hostbase import DEBIAN, UBUNTU

DEFAULT_REGISTRY = "docker.io"

# The official python image's newest Debian release for a Python version, when no codename is given.
PYTHON_DEFAULT_SUITE = "bookworm"


class ImageRefError(ValueError):
    """An image reference that cannot be parsed."""


@dataclass(frozen=True)
class ImageRef:
    """A parsed, fully qualified image reference."""

    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def name(self) -> str:
        """registry/repository without tag or digest."""
        return f"{self.registry}/{self.repository}"

    def __str__(self) -> str:
        if self.digest:
            return f"{self.name}@{self.digest}"
        return f"{self.name}:{self.tag or 'latest'}"

    @property
    def insecure(self) -> bool:
        """A registry on the loopback interface, spoken to over plain HTTP (a local test registry)."""
        host = self.registry.rsplit(":", 1)[0]
        return host in ("localhost", "127.0.0.1", "[::1]")


_NAME = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+|__?)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def parse_ref(text: str) -> ImageRef:
    """Parse `text` like Docker does (short names live on Docker Hub, official images under `library/`)."""
    raw = text.strip()
    rest, _, digest_text = raw.partition("@")
    digest = digest_text if "@" in raw else None
    tag = None
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        rest, tag = rest[:colon], rest[colon + 1 :]
    first, _, remainder = rest.partition("/")
    if remainder and ("." in first or ":" in first or first == "localhost"):
        registry, repository = first, remainder
    else:
        registry, repository = DEFAULT_REGISTRY, rest
    if registry == DEFAULT_REGISTRY and "/" not in repository:
        repository = f"library/{repository}"
    if not _NAME.match(repository):
        raise ImageRefError(f"image reference {text!r}: '{repository}' is not a valid repository name")
    if tag is not None and not _TAG.match(tag):
        raise ImageRefError(f"image reference {text!r}: '{tag}' is not a valid tag")
    if digest is not None and not _DIGEST.match(digest):
        raise ImageRefError(f"image reference {text!r}: '{digest}' is not a sha256 digest")
    if tag is None and digest is None:
        tag = "latest"
    return ImageRef(registry=registry, repository=repository, tag=tag, digest=digest)


@dataclass(frozen=True)
class SynthesisPlan:
    """How to synthesise a base: the distribution, its suite, and what goes on top."""

    distribution: str  # "debian" or "ubuntu"
    suite: str  # the codename mmdebstrap installs
    python: str | None = None  # "3.11": add python3 with `python`/`pip` commands like the official image
    slim: bool = False
    note: str = ""  # what the synthesised image does not reproduce
    # The Debian release whose `python3.X` source package is built into /usr/local, when the named release's
    # own python3 is another version (python:3.13-slim-bookworm: trixie's python3.13 on bookworm).
    python_source: str | None = None
    source_distribution: str = "debian"  # whose archive carries that source (python 3.12: ubuntu noble)

    def describe(self) -> str:
        """A one-line description for notices and records."""
        what = f"{self.distribution} {self.suite}"
        if self.python_source:
            origin = (
                self.python_source
                if self.source_distribution == "debian"
                else (f"{self.source_distribution} {self.python_source}")
            )
            what = f"python {self.python} built from {origin}'s source on {what}"
        elif self.python:
            what = f"python {self.python} from {what}"
        notes = ", ".join(n for n in (self.note, *self.differences()) if n)
        return f"{what}; {notes}" if notes else what

    def differences(self) -> list[str]:
        """How the synthesised image differs from the official one, in words a task author can act on."""
        if self.python_source:
            return [f"python {self.python} compiled without PGO/LTO (slower than the official build)"]
        if self.python:
            return [f"python {self.python} is {self.distribution}'s package in /usr/bin, not /usr/local"]
        return []


def _debian_suite(word: str) -> str | None:
    word = word.split(".", 1)[0]  # debian:13.0 -> 13
    for codename, (number, _) in DEBIAN.items():
        if word in (codename, number):
            return codename
    return None


# Other names of Docker Hub's official images (registry, repository prefix).
OFFICIAL_MIRRORS = (
    (DEFAULT_REGISTRY, "library/"),
    ("public.ecr.aws", "docker/library/"),
    ("mirror.gcr.io", "library/"),
)
# Terminal-Bench's base images: a distribution base plus tools (tmux, asciinema) tasks rarely rely on.
TBENCH = re.compile(r"^laude-institute/t-bench/(ubuntu|python)-(\d+)-(\d+)$")


def _official_name(ref: ImageRef) -> str | None:
    """`debian`, `python`... when `ref` names an official image (on Docker Hub or a mirror of it)."""
    for registry, prefix in OFFICIAL_MIRRORS:
        if ref.registry == registry and ref.repository.startswith(prefix):
            return ref.repository.removeprefix(prefix)
    return None


def synthesis_plan(ref: ImageRef) -> SynthesisPlan | None:
    """The plan for a base evsys can synthesise with mmdebstrap, or None. A digest cannot be honoured: a
    reference with a tag and a digest is synthesised by its tag (the plan says so); one with only a digest
    cannot be."""
    if not ref.tag:
        return None
    image, tag = _official_name(ref), ref.tag
    tbench = TBENCH.match(ref.repository) if ref.registry == "ghcr.io" else None
    if tbench:
        image, tag = tbench.group(1), f"{tbench.group(2)}.{tbench.group(3)}"
    if image is None:
        return None
    plan = _plan(image, tag)
    if plan is None:
        return None
    notes = [f"{ref.name} approximated"] if tbench else []
    notes += ["digest not honoured"] if ref.digest else []
    return dataclasses.replace(plan, note=", ".join(notes)) if notes else plan


def _plan(image: str, tag: str) -> SynthesisPlan | None:
    slim = tag.endswith("-slim") or "-slim-" in tag
    if image == "debian":
        suite = _debian_suite(tag.removesuffix("-slim"))
        return SynthesisPlan("debian", suite, slim=slim) if suite else None
    if image == "ubuntu":
        entry = UBUNTU.get(tag) or next((v for v in UBUNTU.values() if v[0] == tag), None)
        return SynthesisPlan("ubuntu", entry[0]) if entry else None
    if image == "python":
        return _python_plan(tag)
    return None


# The Debian release the official `python:3.X[-slim]` images are built on today, for a Python no Debian
# release packages (python:3.12-slim is trixie, as python:3.13-slim).
OFFICIAL_DEBIAN = "trixie"


def _python_source(version: str) -> tuple[str, str] | None:
    """(distribution, suite) of the archive whose `python3.X` source package carries Python `version`: a
    Debian release, else an Ubuntu one (3.12: noble) for a Python that builds against OpenSSL 3 (3.10+)."""
    debian = next((suite for suite, (_, py) in DEBIAN.items() if py == version), None)
    if debian is not None:
        return "debian", debian
    if tuple(int(n) for n in version.split(".")) < (3, 10):
        return None
    ubuntu = next((codename for codename, py in UBUNTU.values() if py == version), None)
    return ("ubuntu", ubuntu) if ubuntu is not None else None


def _python_plan(tag: str) -> SynthesisPlan | None:
    """`python:3.X[-slim][-<codename>]` -> the named Debian release (by default the release that packages
    3.X, else the official image's current one) with its python3 when that is 3.X, else with 3.X compiled
    from the source package of the Debian or Ubuntu release that carries it."""
    m = re.fullmatch(r"(3\.\d+)(?:\.\d+)?((?:-slim)?)(?:-([a-z]+))?", tag)
    if not m:
        return None
    version, slim, codename = m.group(1), bool(m.group(2)), m.group(3)
    source = _python_source(version)
    if codename is None and source is not None:
        codename = source[1] if source[0] == "debian" else OFFICIAL_DEBIAN
    if codename in DEBIAN and DEBIAN[codename][1] == version:
        return SynthesisPlan("debian", codename, python=version, slim=slim)
    if codename in DEBIAN and source is not None:  # the named release, Python built from another's source
        return SynthesisPlan(
            "debian",
            codename,
            python=version,
            slim=slim,
            python_source=source[1],
            source_distribution=source[0],
        )
    # a release no source of this Python serves: the Ubuntu release that packages it (python:3.8)
    for codename_u, py in UBUNTU.values():
        if py == version:
            return SynthesisPlan("ubuntu", codename_u, python=version, slim=slim)
    return None
