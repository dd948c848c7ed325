"""File transfer for `LocalSandbox`: uploads, downloads and the daemon's own file operations.

Everything here goes through the in-sandbox daemon without starting a process: `files` (remove, empty, create,
extract a tar), `pack` (a tar of one path) and `read` (the tail of one file)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from evsys.records import CopyOutLimits
from evsys.sandbox.base import SandboxError
from evsys.sandbox.copyout import CopiedTree
from evsys.sandbox.local import rootfs
from evsys.sandbox.local.client import Header
from evsys.sandbox.local.core import LocalSandboxCore
from evsys.util.tarsafe import extract_one, tar_of


class LocalFilesMixin(LocalSandboxCore):
    """The file half of `LocalSandbox` (uses its `_running_client()`); overrides the `Sandbox` defaults that
    would start `tar`, `tail` or `rm` processes."""

    async def upload(self, src: Path, dst: str) -> None:
        """Copy a host file or directory into the sandbox at `dst` (root-owned, permissions kept)."""
        src = Path(src)
        path = rootfs.sandbox_path(dst)
        if not src.exists():
            raise SandboxError(f"upload source {src} does not exist")
        if src.is_dir():
            target_dir, arcname = str(path), "."
        else:
            target_dir, arcname = str(path.parent), path.name
        data = await asyncio.to_thread(tar_of, src, arcname)
        try:
            await self.files(mkdir=[target_dir], extract=target_dir, data=data)
        except SandboxError as exc:
            raise SandboxError(f"upload {src} -> {dst} failed: {exc}") from None

    async def download(self, src: str, dst: Path) -> None:
        """Copy a sandbox file or directory to the host path `dst` (permissions kept, no links out)."""
        path = rootfs.sandbox_path(src)
        if str(path) == "/":
            raise SandboxError("download of the whole sandbox root is not supported; name a directory")
        try:
            data = await self.download_tar(src)
        except SandboxError as exc:
            raise SandboxError(f"download {src} -> {dst} failed: {exc}") from None
        await asyncio.to_thread(extract_one, data, path.name, Path(dst))

    async def download_tar(self, src: str) -> bytes:
        """A tar holding the sandbox path `src` under its base name (like `tar -c -C dirname basename`),
        written by the daemon without starting a process; symlinks are kept as links."""
        return b"".join((await self.copy_out(src)).chunks)

    async def copy_out(
        self, src: str, limits: CopyOutLimits | None = None, *, first: Sequence[str] = ()
    ) -> CopiedTree:
        """Like `download_tar`, bounded: the daemon stops adding to the tar at `limits` (cutting files to fit,
        sparse files to what is allocated) and reports what it cut; `first` names (relative to `src`, at most
        one `/` deep) are packed before the rest, so they win the space. The tar arrives in chunks; the daemon
        never holds more than one."""
        path = rootfs.sandbox_path(src)
        if str(path) == "/":
            raise SandboxError("a tar of the whole sandbox root is not supported; name a directory")
        tree = CopiedTree()

        def on_frame(header: Header, payload: bytes) -> None:
            if payload and header.get("fd") == 1:
                tree.chunks.append(payload)

        request = {"op": "pack", "path": str(path), "first": list(first)}
        request |= limits.model_dump(exclude_none=True) if limits is not None else {}
        reply = await self._running_client().request(request, on_frame=on_frame)
        tree.size = int(reply.header.get("size", 0))
        tree.cut = [line for line in str(reply.header.get("cut", "")).splitlines() if line]
        tree.cut_count = int(reply.header.get("cut_count", 0))
        return tree

    async def read_file(self, path: str, max_bytes: int = 1 << 20) -> bytes:
        """The last `max_bytes` of a regular file in the sandbox (what `tail -c` gives), read by the daemon
        as root without starting a process. `SandboxError` when it is missing or not a regular file."""
        request = {"op": "read", "path": str(rootfs.sandbox_path(path)), "max": max_bytes}
        return (await self._running_client().request(request)).stdout

    async def replace_tree(
        self, data: bytes, dst: str, *, empty: Sequence[str] = (), mkdir: Sequence[str] = ()
    ) -> None:
        """As root and without starting a process: remove `dst`, empty each dir of `empty`, create each of
        `mkdir`, then extract the tar `data` at `dst` (root-owned, modes kept)."""
        await self.files(remove=[dst], empty=list(empty), mkdir=[*empty, *mkdir], extract=dst, data=data)

    async def apply_tree(self, data: bytes, *, remove: Sequence[str] = ()) -> None:
        """As root and without starting a process: remove each path of `remove`, then extract the tar
        `data` at the root (root-owned, modes kept)."""
        await self.files(remove=remove, extract="/", data=data)

    async def files(
        self,
        *,
        remove: Sequence[str] = (),
        empty: Sequence[str] = (),
        mkdir: Sequence[str] = (),
        extract: str | None = None,
        data: bytes = b"",
    ) -> None:
        """As root and without starting a process: remove paths (like `rm -rf`), empty directories, create
        directories (like `mkdir -p`), then extract the tar `data` into `extract`. `SandboxError` names what
        failed."""
        paths = {
            key: [str(rootfs.sandbox_path(p)) for p in value]
            for key, value in (("remove", remove), ("empty", empty), ("mkdir", mkdir))
        }
        request = {"op": "files", **paths, "extract": str(rootfs.sandbox_path(extract)) if extract else None}
        await self._running_client().request(request, data)
