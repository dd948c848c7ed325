"""evsys's private image storage (containers/storage, overlay driver) and the tools that work on it.

Images live under `$EVSYS_CACHE_DIR/images/storage` (default `~/.cache/evsys/images/storage`), apart from
the system's own buildah/podman images. The overlay driver keeps every layer as a directory
(`overlay/<id>/diff`) in the kernel's overlay format (whiteouts are 0/0 character devices, opaque directories
carry the `trusted.overlay.opaque` xattr), so a sandbox mounts an image's layers directly as overlay lower
layers: nothing is copied per trial, and a layer shared by two images is stored once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evsys.records import ImageConfig, ImageSpec

STOP_GRACE = 10.0
TOOL_PACKAGES = {"buildah": "buildah", "skopeo": "skopeo", "mmdebstrap": "mmdebstrap"}

LineCallback = Callable[[str], None]
"""Called with each line a tool prints (a build's progress)."""


class ImageError(RuntimeError):
    """An image could not be built, pulled, synthesised or found (the message says which and why)."""


class ToolMissing(ImageError):
    """A program evsys needs for images is not installed."""


def cache_root() -> Path:
    """$EVSYS_CACHE_DIR/images (default ~/.cache/evsys/images)."""
    base = os.environ.get("EVSYS_CACHE_DIR") or str(Path.home() / ".cache" / "evsys")
    return Path(base) / "images"


def tool(name: str) -> str:
    """The path of an image tool, or ToolMissing naming the Debian package that provides it."""
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if path is None:
        raise ToolMissing(f"'{name}' is not installed: apt-get install {TOOL_PACKAGES.get(name, name)}")
    return path


@dataclass(frozen=True)
class ToolResult:
    """What a tool run printed and how it ended."""

    returncode: int
    output: str
    timed_out: bool = False


async def run_tool(
    argv: list[str],
    *,
    timeout: float | None = None,  # noqa: ASYNC109 - the tool's own limit
    log: Path | None = None,
    on_line: LineCallback | None = None,
    env: dict[str, str] | None = None,
) -> ToolResult:
    """Run a tool in its own process group; its output (stdout and stderr merged) goes to `log` as it comes
    and each line to `on_line`. A timeout kills the whole group."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )
    chunks: list[bytes] = []
    sink = open(log, "ab") if log is not None else None  # noqa: ASYNC230 - small appends

    async def pump() -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            chunks.append(line)
            if len(chunks) > 4000:
                del chunks[:2000]
            if sink is not None:
                sink.write(line)
                sink.flush()
            if on_line is not None:
                on_line(line.decode("utf-8", "replace").rstrip())

    timed_out = False
    try:
        try:
            await asyncio.wait_for(pump(), timeout)
        except TimeoutError:
            timed_out = True
            await _stop_group(proc)
        code = await proc.wait()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise
    finally:
        if sink is not None:
            sink.close()
    text = b"".join(chunks).decode("utf-8", "replace")
    return ToolResult(code if not timed_out else -9, text, timed_out)


async def _stop_group(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the tool's process group (buildah then removes its working containers and unmounts them),
    SIGKILL whatever is left after STOP_GRACE seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), STOP_GRACE)
    except TimeoutError:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


class Storage:
    """One containers/storage root (overlay driver) with the buildah and skopeo options that address it."""

    def __init__(self, root: Path | None = None) -> None:
        self.home = Path(root) if root is not None else cache_root()
        self.root = self.home / "storage"
        self.runroot = self.home / "run"
        self._parsed: dict[Path, tuple[tuple[int, int, int], list]] = {}

    @property
    def options(self) -> list[str]:
        """Global buildah options selecting this storage."""
        return ["--root", str(self.root), "--runroot", str(self.runroot), "--storage-driver", "overlay"]

    def transport(self, name: str) -> str:
        """The skopeo destination naming `name` in this storage."""
        return f"containers-storage:[overlay@{self.root}+{self.runroot}]{name}"

    def buildah(self, *args: str) -> list[str]:
        """A buildah command line on this storage."""
        return [tool("buildah"), *self.options, *args]

    # ------------------------------------------------------------ reading the storage's own records
    def _read_json(self, path: Path) -> list:
        """A storage index file, parsed again only when it changed (same size and mtime: the cached copy)."""
        try:
            st = path.stat()
        except FileNotFoundError:
            return []
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        cached = self._parsed.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        data = json.loads(path.read_text() or "[]")
        self._parsed[path] = (stamp, data)
        return data

    def _images(self) -> list[dict]:
        return self._read_json(self.root / "overlay-images" / "images.json")

    def _layers(self) -> dict[str, dict]:
        return {layer["id"]: layer for layer in self._read_json(self.root / "overlay-layers" / "layers.json")}

    def find(self, name: str) -> dict | None:
        """The storage's record of the image called `name` (a full name or an image id), or None."""
        for image in self._images():
            if image["id"] == name or name in image.get("names", []):
                return image
        return None

    def images(self) -> list[dict]:
        """Every image record in the storage."""
        return self._images()

    def layer_ids(self, image: dict) -> list[str]:
        """The ids of the image's layers, lowest first."""
        layers = self._layers()
        chain, current = [], image.get("layer")
        while current:
            chain.append(current)
            current = layers.get(current, {}).get("parent")
        return chain[::-1]

    def layer_dirs(self, image: dict) -> list[Path]:
        """The image's layers as host directories, lowest first (short `overlay/l/<link>` paths keep the
        overlay mount options short)."""
        out = []
        for layer_id in self.layer_ids(image):
            layer_dir = self.root / "overlay" / layer_id
            link = layer_dir / "link"
            short = self.root / "overlay" / "l" / link.read_text().strip() if link.is_file() else None
            out.append(short if short is not None and short.exists() else layer_dir / "diff")
        return out

    def layer_sizes(self) -> dict[str, int]:
        """Uncompressed size of every layer, by id."""
        return {lid: int(layer.get("diff-size") or 0) for lid, layer in self._layers().items()}

    def release(self) -> None:
        """Unmount what containers/storage mounted under this root (its private bind of `overlay/`, any
        container still mounted) so the directory can be deleted. For throw-away storages (tests)."""
        root = str(self.root.resolve()) + "/"
        with open("/proc/self/mountinfo") as f:
            points = [line.split()[4] for line in f]
        for point in sorted((p for p in points if p.startswith(root)), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)

    async def image_config(self, name: str) -> ImageConfig:
        """The OCI config of an image (Env, WorkingDir, User, Entrypoint, Cmd)."""
        result = await run_tool(self.buildah("inspect", "--type", "image", name), timeout=60)
        if result.returncode != 0:
            raise ImageError(f"cannot inspect image {name}: {result.output.strip()[-500:]}")
        config = (json.loads(result.output).get("OCIv1") or {}).get("config") or {}
        env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
        return ImageConfig(
            env=env,
            workdir=config.get("WorkingDir") or None,
            user=config.get("User") or None,
            entrypoint=list(config.get("Entrypoint") or []),
            cmd=list(config.get("Cmd") or []),
        )

    async def spec(self, name: str) -> ImageSpec:
        """The ImageSpec of a stored image (its layers and config)."""
        image = self.find(name)
        if image is None:
            raise ImageError(f"image {name} is not in evsys's image storage ({self.root})")
        return ImageSpec(
            ref=name,
            rootfs_layers=self.layer_dirs(image),
            config=await self.image_config(name),
            source=self.transport(name),
            image_id=image["id"],
        )
