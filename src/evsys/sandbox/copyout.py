"""Bounds on copying a tree out of a sandbox (a trial's `/logs`): bytes, entries, depth, single-file size.

A sandbox enforces them while it packs the tree, so what is over a bound is never even sent to the host. The
same model is the job-wide setting (`JobConfig.log_limits`, `evsys run --log-limit`), the task's setting
(`[environment.logs]` in task.toml) and the resolved bounds a trial uses (`TrialConfig.log_limits`)."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

MIB = 1 << 20
DEFAULT_MAX_BYTES = 64 * MIB
DEFAULT_MAX_ENTRIES = 20_000
DEFAULT_MAX_DEPTH = 32
DEFAULT_MAX_FILE_BYTES = 32 * MIB
_SUFFIXES = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


class CopyOutLimits(BaseModel):
    """Caps on one copy out; a field left at None is not set here (see `over` and `resolved`)."""

    model_config = ConfigDict(extra="forbid")

    max_bytes: int | None = Field(None, gt=0, description="Total size of the copy (the tar), in bytes.")
    max_entries: int | None = Field(None, gt=0, description="Files, directories and links copied.")
    max_depth: int | None = Field(None, ge=1, le=128, description="Directory levels below the copied root.")
    max_file_bytes: int | None = Field(None, gt=0, description="Bytes kept of any one file (its head).")

    def over(self, fallback: CopyOutLimits | None) -> CopyOutLimits:
        """These limits, with every field not set here taken from `fallback`."""
        if fallback is None:
            return self
        mine = self.model_dump(exclude_none=True)
        return CopyOutLimits(**(fallback.model_dump(exclude_none=True) | mine))

    def resolved(self) -> CopyOutLimits:
        """Every field set: the evsys defaults fill what is not."""
        return self.over(DEFAULT_LIMITS)


DEFAULT_LIMITS = CopyOutLimits(
    max_bytes=DEFAULT_MAX_BYTES,
    max_entries=DEFAULT_MAX_ENTRIES,
    max_depth=DEFAULT_MAX_DEPTH,
    max_file_bytes=DEFAULT_MAX_FILE_BYTES,
)


def parse_limit(text: str) -> tuple[str, int]:
    """`max_bytes=100M` -> ("max_bytes", 104857600): one `KEY=VALUE` of the `--log-limit` flag (sizes may end
    in K, M or G). ValueError naming the key or value when it is not one."""
    key, sep, value = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or key not in CopyOutLimits.model_fields:
        names = ", ".join(CopyOutLimits.model_fields)
        raise ValueError(f"--log-limit {text!r}: expected KEY=VALUE with KEY one of {names}")
    value = value.strip().lower()
    scale = _SUFFIXES.get(value[-1:], 1)
    digits = value[:-1] if scale != 1 else value
    if not digits.isdigit() or int(digits) <= 0:
        raise ValueError(f"--log-limit {text!r}: {value!r} is not a positive whole number (K, M, G allowed)")
    return key, int(digits) * scale


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
