"""What a sandbox needs to know about the image it runs: `ImageSpec` (which image, where its layers are) and
`ImageConfig` (the parts of the OCI image config a sandbox applies).

The `images` package builds, pulls or synthesises images and fills these records; a backend turns them into a
running root filesystem: the local backend mounts `rootfs_layers` as overlay lower layers, a Docker backend
hands `ref` to its daemon. `SandboxSpec.image` is None for tasks that run on the host-rootfs layer (no
Dockerfile, and Python tasks). The records live here, below `images/`, so both the engine and every backend
can name them.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class ImageConfig(BaseModel):
    """The image's own runtime settings (the OCI config's `Env`, `WorkingDir`, `User`, `Entrypoint`, `Cmd`).

    A backend applies them beneath the `SandboxSpec`: the image's environment is the base that the spec's
    `env` (and then each exec's `env`) is layered on, and the image's `PATH` is what `${PATH}` expands to."""

    model_config = ConfigDict(frozen=True)

    env: dict[str, str] = Field(default_factory=dict, description="`Env`, as NAME -> value.")
    workdir: str | None = Field(None, description="`WorkingDir`; None: the image sets none.")
    user: str | None = Field(None, description="`User` (name or uid[:gid]); None: root.")
    entrypoint: list[str] = Field(default_factory=list, description="`Entrypoint` (exec form).")
    cmd: list[str] = Field(default_factory=list, description="`Cmd` (exec form).")


class ImageSpec(BaseModel):
    """Which image a sandbox runs, and (for backends that mount layers themselves) where its layers are."""

    model_config = ConfigDict(frozen=True)

    ref: str = Field(
        description="The image as the task names it or as it was built: `python:3.13-slim`, "
        "`ghcr.io/org/img@sha256:...`, or the content key of a locally built image."
    )
    rootfs_layers: list[Path] = Field(
        default_factory=list,
        description="Unpacked layer directories on the host, lowest first, for backends that mount layers "
        "(the local backend); empty for backends that hand `ref` to a daemon.",
    )
    config: ImageConfig = Field(default_factory=ImageConfig)
    source: str | None = Field(
        None,
        description="Where a daemon-based backend copies the image from when its daemon lacks it: a skopeo "
        "transport reference (evsys's own image storage, `containers-storage:[...]name`).",
    )
    image_id: str | None = Field(
        None,
        description="The image's id in evsys's image storage (the digest of its config): a daemon-based "
        "backend loads this content once and runs exactly it, whatever its daemon holds under `ref`.",
    )
    dockerfile: Path | None = Field(
        None,
        description="The task's Dockerfile, for a backend that builds images itself "
        "(`Capability.REMOTE_IMAGES`; its directory is the build context); None: `ref` names a registry "
        "image or one evsys built.",
    )
