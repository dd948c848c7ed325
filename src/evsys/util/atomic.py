"""Atomic file writes: a crash never leaves a truncated file behind."""

from __future__ import annotations

import errno
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

EMFILE_RETRY_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8)


def write_bytes_atomic(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Write `data` to `path` via a temp file in the same directory, then rename over the target.

    The rename alone makes the write all-or-nothing for a crashed or killed process; `fsync=True` (the
    default) also flushes the data to disk first, so the file survives a power loss too (~1 ms per file here).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _mkstemp(path)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; job files are meant to be read by other tools and users
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _mkstemp(path: Path) -> tuple[int, str]:
    """A temp file beside `path`. When the process is out of descriptors (EMFILE, ENFILE), try again a few
    times over ~1.5 s: descriptors held by connections and finishing trials come free, and a result is worth
    the wait."""
    for delay in EMFILE_RETRY_DELAYS:
        try:
            return tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            time.sleep(delay)
    return tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)


def write_text_atomic(path: Path, text: str, *, fsync: bool = True) -> None:
    """Write UTF-8 text atomically."""
    write_bytes_atomic(path, text.encode("utf-8"), fsync=fsync)


def write_json_atomic(path: Path, obj: Any, *, fsync: bool = True) -> None:
    """Write a pydantic model or a JSON-able object atomically, pretty-printed."""
    if isinstance(obj, BaseModel):
        text = obj.model_dump_json(indent=2)
    else:
        text = json.dumps(obj, indent=2, default=str)
    write_text_atomic(path, text + "\n", fsync=fsync)
