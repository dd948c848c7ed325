"""Copying a tree out of a sandbox (a trial's `/logs`) within `CopyOutLimits` (`evsys.records`): bytes,
entries, depth, single-file size.

A sandbox enforces them while it packs the tree, so what is over a bound is never even sent to the host."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field

from evsys.records.sandbox import CopyOutLimits


@dataclass
class CopiedTree:
    """A bounded copy out: the tar in the chunks it arrived in, and what the bounds cut from it."""

    chunks: list[bytes] = field(default_factory=list)
    size: int = 0
    cut: list[str] = field(default_factory=list)  # "name: why", for the first few cut entries
    cut_count: int = 0  # how many entries were cut in all

    def reader(self) -> ChunkReader:
        """A file object that reads the tar once, front to back, dropping each chunk once read."""
        return ChunkReader(self.chunks)


class ChunkReader:
    """Reads a list of byte chunks as one stream, consuming the list (memory is freed as it goes)."""

    def __init__(self, chunks: list[bytes]) -> None:
        chunks.reverse()
        self._chunks = chunks
        self._current = memoryview(b"")

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes (all that is left when negative)."""
        out = bytearray()
        while size < 0 or len(out) < size:
            if not self._current:
                if not self._chunks:
                    break
                self._current = memoryview(self._chunks.pop())
                continue
            take = len(self._current) if size < 0 else min(size - len(out), len(self._current))
            out += self._current[:take]
            self._current = self._current[take:]
        return bytes(out)


CUT_SHOWN = 20  # cut entries named in CopiedTree.cut; the rest are only counted


def bound_tar(data: bytes, limits: CopyOutLimits, first: Sequence[str] = ()) -> CopiedTree:
    """Re-pack the tar `data` (one tree under its base name, as `Sandbox.download_tar` gives) within `limits`,
    the `first` names (relative to the tree) ahead of the rest: `Sandbox.copy_out`'s default for backends
    that cannot bound the copy inside the sandbox (there the whole tree crosses to the host first)."""
    limits = limits.resolved()
    assert limits.max_bytes and limits.max_entries and limits.max_depth and limits.max_file_bytes
    tree, out = CopiedTree(), io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(data), mode="r:") as src,
        tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst,
    ):
        members = src.getmembers()
        root = members[0].name.split("/")[0] if members else ""
        ahead = tuple(f"{root}/{name.strip('/')}" for name in first)
        members.sort(key=lambda m: not any(m.name == a or m.name.startswith(a + "/") for a in ahead))
        for member in members:
            why = _over(member, limits, entries=len(dst.getmembers()))
            file = src.extractfile(member) if member.isfile() else None
            payload = file.read(limits.max_file_bytes) if file is not None else None
            if why is None and payload is not None and len(payload) < member.size:
                why = f"kept the first {len(payload)} of {member.size} bytes"
                member.size = len(payload)
            cost = tarfile.BLOCKSIZE * 3 + -(-member.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
            if why is None or why.startswith("kept"):
                if out.tell() + cost + 2 * tarfile.RECORDSIZE > limits.max_bytes:
                    why = "over the copy's size bound"
                else:
                    dst.addfile(member, io.BytesIO(payload) if payload is not None else None)
            if why is not None:
                tree.cut_count += 1
                if len(tree.cut) < CUT_SHOWN:
                    tree.cut.append(f"{member.name}: {why}")
    tree.chunks, tree.size = [out.getvalue()], out.tell()
    return tree


def _over(member: tarfile.TarInfo, limits: CopyOutLimits, *, entries: int) -> str | None:
    if member.name.count("/") > (limits.max_depth or 0):
        return "deeper than the depth bound"
    if entries >= (limits.max_entries or 0):
        return "over the entry bound"
    return None
