"""What a local sandbox's pid 1 (its daemon) passes on to every process it starts, reported by the daemon
when it starts (its `ready` frame) and put back when the sandbox is reset, so the next trial inherits nothing
of the last one through pid 1.

Root inside may change, without any capability, pid 1's rlimits (`prlimit --pid 1`: the seccomp filter
refuses it, seccomp.py; a hard limit lowered anyway could not be raised again without CAP_SYS_RESOURCE) and,
by writing /proc/1/..., its oom_score_adj (oom_adj is a view of it), coredump_filter and its autogroup's nice.
Its nice value, scheduling policy, cpu affinity and io priority cannot be changed from inside: that needs
CAP_SYS_NICE or pid 1's capabilities, which commands never hold.
"""

from __future__ import annotations

import os
import re
import resource
from dataclasses import dataclass
from pathlib import Path

from evsys.sandbox.base import SandboxError

# resource number -> name (RLIMIT_OFILE is another name of RLIMIT_NOFILE)
RLIMIT_NAMES = {
    getattr(resource, n): n for n in sorted(dir(resource), reverse=True) if n.startswith("RLIMIT_")
}
# /proc/<pid>/ entry -> how the value it shows is written back (coredump_filter shows hex without 0x)
PROC_FILES = {"oom_score_adj": "{}", "coredump_filter": "0x{}"}
_AUTOGROUP_NICE = re.compile(r"nice (-?\d+)")


@dataclass(frozen=True)
class Pid1State:
    """Pid 1's rlimits and the /proc entries of it that its children inherit, as they were at one moment."""

    limits: tuple[tuple[int, int, int], ...]  # (resource, soft, hard)
    files: tuple[tuple[str, str], ...]  # (/proc/<pid>/ entry, the value it takes back)

    @classmethod
    def from_ready(cls, ready: dict) -> Pid1State:
        """The state the daemon reported in its `ready` frame, as it started (native/main.c): nothing else
        has run in the sandbox yet, and the orchestrator reads no /proc file for it."""
        try:
            pairs = [tuple(int(v) for v in pair.split()) for pair in ready["limits"].split(",")]
            limits = tuple((res, *pairs[res]) for res in sorted(RLIMIT_NAMES))
            texts = {name: ready[name] for name in (*PROC_FILES, "autogroup")}
        except (KeyError, ValueError, IndexError, TypeError, AttributeError) as exc:
            raise SandboxError(f"the sandbox's daemon did not report its state: {exc!r}") from None
        return cls(limits=limits, files=_files(texts))

    @classmethod
    def read(cls, pid: int) -> Pid1State:
        """The state of host process `pid` now (SandboxError if it is gone)."""
        try:
            limits = tuple((res, *resource.prlimit(pid, res)) for res in sorted(RLIMIT_NAMES))
            texts = {name: _read(pid, name) for name in (*PROC_FILES, "autogroup")}
        except (OSError, ValueError) as exc:
            raise SandboxError(f"cannot read the state of the sandbox's daemon: {exc}") from None
        return cls(limits=limits, files=_files(texts))

    def restore(self, pid: int) -> None:
        """Put back on host process `pid` whatever differs from this state; SandboxError naming what could not
        be put back (then the sandbox must not be reused)."""
        now = Pid1State.read(pid)
        failed = []
        for limit, limit_now in zip(self.limits, now.limits, strict=True):
            if limit_now != limit:
                try:
                    resource.prlimit(pid, limit[0], limit[1:])
                except (OSError, ValueError) as exc:
                    failed.append(f"{RLIMIT_NAMES[limit[0]]} ({exc})")
        for (name, value), entry_now in zip(self.files, now.files, strict=True):
            if entry_now[1] != value:
                try:
                    Path(f"/proc/{pid}/{name}").write_text(value)
                except OSError as exc:
                    failed.append(f"{name} ({exc.strerror})")
        if failed:
            raise SandboxError(f"cannot put back the daemon's {', '.join(failed)}, changed from inside")


def _files(texts: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The /proc entries' values as they are written back, from their texts ("" when absent)."""
    files = [(name, form.format(texts[name].strip())) for name, form in PROC_FILES.items() if texts[name]]
    found = _AUTOGROUP_NICE.search(texts["autogroup"])  # only with CONFIG_SCHED_AUTOGROUP
    return tuple(files + ([("autogroup", found.group(1))] if found else []))


def _read(pid: int, name: str) -> str:
    """/proc/<pid>/<name>, "" when absent (a plain read: a pathlib one costs five times as much)."""
    try:
        fd = os.open(f"/proc/{pid}/{name}", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return ""
    try:
        return os.read(fd, 4096).decode()
    finally:
        os.close(fd)
