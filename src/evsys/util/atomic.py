"""Atomic file writes: a crash never leaves a truncated file behind."""

from __future__ import annotations

import errno
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

EMFILE_RETRY_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8)


def write_bytes_atomic(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Write `data` to `path` via a temp file in the same directory, then rename over the target.

    The rename alone makes the write all-or-nothing for a crashed or killed process; `fsync=True` (the
    default) also flushes the data to disk first, so the file survives a power loss too (~1 ms per file here).
    The parent directory is made when missing. Plain descriptor calls: a job writes a few files per trial, so
    what each write costs is orchestrator CPU per trial.
    """
    fd, tmp = _open_temp(os.fspath(path))
    try:
        os.fchmod(fd, 0o644)  # files are meant to be read by other tools and users, whatever the umask
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _open_temp(path: str) -> tuple[int, str]:
    """A new temp file beside `path` (`.<name>.<random>.tmp`, the name stale-file cleanup looks for), its
    directory made when missing. When the process is out of descriptors (EMFILE, ENFILE), try again a few
    times over ~1.5 s: descriptors held by connections and finishing trials come free, and a result is worth
    the wait."""
    directory, name = os.path.split(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
    delays = iter(EMFILE_RETRY_DELAYS)
    made = False
    while True:
        tmp = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileNotFoundError:
            if made:
                raise
            os.makedirs(directory or ".", exist_ok=True)
            made = True
        except FileExistsError:  # another writer drew the same name: draw again
            continue
        except OSError as exc:
            delay = next(delays, None) if exc.errno in (errno.EMFILE, errno.ENFILE) else None
            if delay is None:
                raise
            time.sleep(delay)


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
