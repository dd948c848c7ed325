"""Tool images synthesised from the packages their binaries are published in, for machines that reach the
package registries but no container registry.

Some images exist only to carry a binary into other builds: `COPY --from=ghcr.io/astral-sh/uv:0.9.7 /uv
/uvx /bin/` takes uv from an image that is `FROM scratch` plus `/uv` and `/uvx`. The same binaries are
published on PyPI as the `uv==<version>` wheel (the statically linked musl build, as in the image). When such
an image cannot be pulled, evsys downloads the wheel for the host's architecture, places its binaries where
the image has them, and stores the result under the requested name, labelled as synthesised and from what.
"""

from __future__ import annotations

import asyncio
import io
import platform
import re
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from evsys.images.refs import ImageRef
from evsys.images.storage import ImageError, LineCallback, Storage, run_tool

SYNTH_LABEL = "org.evsys.synthesised"
DOWNLOAD_TIMEOUT = 600.0
WHEEL_PLATFORMS = {"x86_64": "musllinux_1_1_x86_64", "aarch64": "musllinux_1_1_aarch64"}
"""The wheel platform tag whose binaries are statically linked, per host machine."""


@dataclass(frozen=True)
class ToolImage:
    """A tool image evsys can synthesise: its repository, the PyPI package, binary -> path in the image."""

    repository: str  # registry/repository, e.g. "ghcr.io/astral-sh/uv"
    package: str
    binaries: tuple[tuple[str, str], ...]  # (script name in the wheel, path in the image)
    entrypoint: str


TOOL_IMAGES = (ToolImage("ghcr.io/astral-sh/uv", "uv", (("uv", "/uv"), ("uvx", "/uvx")), "/uv"),)
VERSION_TAG = re.compile(r"^\d+\.\d+(?:\.\d+)?$")


@dataclass(frozen=True)
class ToolImagePlan:
    """How to synthesise one tool image: which image, from which package version."""

    image: ToolImage
    version: str

    def describe(self) -> str:
        """A one-line description for notices and records."""
        return (
            f"{self.image.package}=={self.version} wheel from PyPI ({WHEEL_PLATFORMS.get(_machine(), '?')})"
        )


def _machine() -> str:
    return platform.machine()


def tool_image_plan(ref: ImageRef) -> ToolImagePlan | None:
    """The plan for a tool image published as a package (`ghcr.io/astral-sh/uv:<version>`), or None. Only a
    bare version tag is honoured: tags naming a distribution variant (`0.9.7-bookworm`) are whole images."""
    for image in TOOL_IMAGES:
        if f"{ref.registry}/{ref.repository}" == image.repository and ref.tag and VERSION_TAG.match(ref.tag):
            return ToolImagePlan(image, ref.tag)
    return None


async def synthesise_tool_image(
    storage: Storage,
    name: str,
    plan: ToolImagePlan,
    *,
    log: Path | None = None,
    on_line: LineCallback | None = None,
) -> None:
    """Download the plan's wheel, place its binaries as the image has them, and store the image as `name`."""
    wheel_platform = WHEEL_PLATFORMS.get(_machine())
    if wheel_platform is None:
        raise ImageError(f"cannot synthesise {name}: no {plan.image.package} wheel for machine {_machine()}")
    storage.home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tool-image-", dir=storage.home) as tmp:
        argv = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--platform",
            wheel_platform,
            "--dest",
            tmp,
            f"{plan.image.package}=={plan.version}",
        ]
        done = await run_tool(argv, timeout=DOWNLOAD_TIMEOUT, log=log, on_line=on_line)
        wheels = sorted(await asyncio.to_thread(lambda: list(Path(tmp).glob("*.whl"))))
        if done.returncode != 0 or not wheels:
            tail = "\n".join(done.output.strip().splitlines()[-8:])
            raise ImageError(f"synthesising {name}: downloading {plan.describe()} failed:\n{tail}")
        tarball = Path(tmp) / "rootfs.tar"
        tarball.write_bytes(_rootfs_tar(wheels[0], plan))
        await commit_rootfs(
            storage, name, tarball, ["--entrypoint", f'["{plan.image.entrypoint}"]'], plan.describe()
        )


def _rootfs_tar(wheel: Path, plan: ToolImagePlan) -> bytes:
    """A tar holding the wheel's binaries at the image's paths (mode 0755, owned by root)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(wheel) as archive, tarfile.open(fileobj=buf, mode="w") as tar:
        scripts = {Path(n).name: n for n in archive.namelist() if re.search(r"\.data/scripts/[^/]+$", n)}
        for script, path in plan.image.binaries:
            if script not in scripts:
                raise ImageError(
                    f"{wheel.name} has no {script} binary (it has: {', '.join(sorted(scripts))})"
                )
            data = archive.read(scripts[script])
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


async def commit_rootfs(storage: Storage, name: str, tarball: Path, config: list[str], describe: str) -> None:
    """Import `tarball` as a one-layer image `name` with the buildah config flags `config`, labelled as
    synthesised (`describe` says from what)."""
    run = storage.buildah
    created = await run_tool(run("from", "--pull=never", "scratch"), timeout=120)
    if created.returncode != 0:
        raise ImageError(f"buildah from scratch failed: {created.output.strip()[-500:]}")
    container = created.output.strip().splitlines()[-1]
    try:
        for argv in (
            run("add", container, str(tarball), "/"),
            run("config", *config, "--label", f"{SYNTH_LABEL}={describe}", container),
            run("commit", "-q", "--rm", container, name),
        ):
            done = await run_tool(argv, timeout=600)
            if done.returncode != 0:
                raise ImageError(f"importing {name}: {argv[-3]} failed: {done.output[-500:]}")
    except BaseException:
        await run_tool(run("rm", container), timeout=60)
        raise
