"""cgroup limits for local sandboxes: memory, pids and cpu, on cgroup v2 where it is mounted (with the
controllers delegated to evsys's own cgroup, delegation.py), v1 otherwise; a controller missing here leaves
its limit to a fallback or unenforced (limits.py). The orchestrator creates the directories (and removes them
at stop); the sandbox's setup step (`evsysd --setup`, native/setup.c) writes the limits and joins them, from
the items `SandboxCgroup.setup_items` lists, off the orchestrator's event loop.

Every sandbox gets one directory per controller named `evsys-<owner pid>-<sequence>-<sandbox name, cut>`
(the sequence number makes it unique within its orchestrator however long the name), created below the
cgroup the orchestrator itself lives in (read from /proc/self/cgroup; on hybrid hosts the memory controller is
often not at the root). The bwrap process joins them before it execs, so every descendant is limited and
countable.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from evsys.sandbox.local import cgsetup, delegation

CGROUP_ROOT = Path("/sys/fs/cgroup")
PREFIX = "evsys-"
V1_CONTROLLERS = ("memory", "pids", "cpu", "freezer")
_NAME_OK = re.compile(r"[^A-Za-z0-9_.-]")
NAME_CHARS = 64  # how much of the sandbox's name a cgroup name keeps (readability only; never uniqueness)
_SEQUENCE = itertools.count(1)
PEAK_SLACK = 1 << 16  # a v1 usage watermark this close to the limit means the limit was reached


@dataclass
class CgroupLayout:
    """Where each controller lives for this process: version and controller -> parent directory."""

    version: int
    parents: dict[str, Path] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # controller -> why evsys cannot use it here

    @property
    def controllers(self) -> list[str]:
        """The controllers evsys can use here."""
        return sorted(self.parents)


def _own_paths() -> dict[str, str]:
    """controller -> cgroup path of this process, from /proc/self/cgroup ('' key = the v2 unified path)."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        for name in names.split(",") if names else [""]:
            paths[name] = path
    return paths


def detect_layout(root: Path = CGROUP_ROOT) -> CgroupLayout:
    """cgroup v2 when it is mounted at `root`: the controllers delegated to this process's own cgroup
    (delegation.py; enabling them may move this process into a leaf). Else the v1 hierarchies this process
    is in. `missing` says why each controller evsys wants is unusable."""
    own = _own_paths()
    if (root / "cgroup.controllers").exists():
        base, usable, why = delegation.enable_controllers(root, own.get("", "/"))
        return CgroupLayout(2, {c: base for c in usable}, why)
    layout = CgroupLayout(1)
    for ctrl in V1_CONTROLLERS:
        base = root / ctrl
        if (base / "cgroup.procs").exists() and ctrl in own:
            parent = base / own[ctrl].lstrip("/")
            if parent.is_dir():
                layout.parents[ctrl] = parent
                continue
        layout.missing[ctrl] = f"no cgroup v1 {ctrl} hierarchy of this process under {root}"
    return layout


def counter_files(version: int) -> dict[str, tuple[str, str, str]]:
    """counter -> (controller, file, key in it; "" for a file holding one number), for cgroup `version`."""
    if version == 2:
        memory = {
            "memory": ("memory", "memory.events", "oom_kill"),
            "memory_limit": ("memory", "memory.events", "oom"),
        }
    else:
        memory = {
            "memory": ("memory", "memory.oom_control", "oom_kill"),
            # v1 on recent kernels keeps memory.failcnt at 0: the usage watermark against the limit says
            # whether the limit was reached (read_counters; `reset_peak` at each reset)
            "memory_limit": ("memory", "memory.max_usage_in_bytes", ""),
            "memory_max": ("memory", "memory.limit_in_bytes", ""),
        }
    return memory | {"pids": ("pids", "pids.events", "max")}


def parse_counter(text: str, key: str) -> int:
    """The value of `key` in a flat-keyed cgroup file ("oom_kill 3" lines), or the file's one number when
    `key` is ""; 0 when absent."""
    if not key:
        return int(text.split()[0]) if text.split() else 0
    match = re.search(rf"^{key} (\d+)$", text, re.M)
    return int(match.group(1)) if match else 0


def cgroup_name(name: str, owner: int | None = None) -> str:
    """A fresh directory name for a sandbox: prefix, owning pid, a sequence number unique in this process,
    the sanitized sandbox name cut to NAME_CHARS (two sandboxes never share one, whatever their names)."""
    return f"{PREFIX}{owner or os.getpid()}-{next(_SEQUENCE)}-{_NAME_OK.sub('_', name)[:NAME_CHARS]}"


class SandboxCgroup:
    """The cgroup directories of one sandbox, with its limits and limit-hit counters."""

    def __init__(
        self, layout: CgroupLayout, name: str, *, skip: tuple[str, ...] = (), flat: bool = False
    ) -> None:
        self.layout = layout
        self.dirs = {ctrl: parent / name for ctrl, parent in layout.parents.items() if ctrl not in skip}
        # the controllers whose cgroup has the machinery / agent / verifier children (cgsetup.py)
        self.nested = () if flat else tuple(c for c in cgsetup.NESTED if c in self.dirs)
        self._counter_fds: dict[str, int] = {}
        self._counters_open = False
        self.counters: dict[str, int] = {}  # the totals at the last reading (none yet: all zero)

    def dir_paths(self) -> list[str]:
        """The directories to create, each once. The spawner makes them before the setup step
        (spawner.make_dirs), so a setup step orphaned by a dying spawner can never create one after this
        sandbox's teardown removed them; parents first)."""
        children = [d for scope in cgsetup.SCOPES for d in self.scope_dirs(scope)]
        return list(dict.fromkeys(map(str, [*self.dirs.values(), *children])))

    def scope_dirs(self, scope: str) -> list[Path]:
        """The directories of one scope (cgsetup.SCOPES) below the nested controllers' cgroups, each once."""
        return list(dict.fromkeys(self.dirs[ctrl] / scope for ctrl in self.nested if ctrl in self.dirs))

    def forget_dirs(self) -> None:
        """Forget every directory (none was made: tearing this sandbox down must never touch another's)."""
        self.dirs = {}

    def setup_items(self, *, memory_mb: int | None, pids_max: int, cpus: float | None) -> list[str]:
        """What `evsysd --setup` does with the directories the spawner made, before bwrap (native/setup.c):
        write the limits, open the daemon's cgroup files, join; off the orchestrator's event loop."""
        return cgsetup.setup_items(self, memory_mb, pids_max, cpus)

    def _open_counters(self) -> None:
        """Open the files that count OOM kills, memory-limit hits and pids-cap hits once, so each later
        reading is one pread per file."""
        self._counters_open = True
        for kind, (ctrl, filename, _) in counter_files(self.layout.version).items():
            if ctrl not in self.dirs:
                continue
            places = {"": self.dirs[ctrl]}
            if ctrl in self.nested:
                places |= {
                    f"{scope}.": self.dirs[ctrl] / scope for scope in (cgsetup.AGENT, cgsetup.VERIFIER)
                }
            for prefix, directory in places.items():
                with contextlib.suppress(FileNotFoundError):
                    fd = os.open(directory / filename, os.O_RDONLY | os.O_CLOEXEC)
                    self._counter_fds[prefix + kind] = fd

    def read_counters(self) -> dict[str, int]:
        """Current totals (a new cgroup's are zero: `counters` starts empty): 'memory' = OOM kills,
        'memory_limit' = times the memory limit was reached (v2 memory.events `oom`; v1: 1 when the usage
        watermark reached the limit, else 0),
        'pids' = fork attempts refused by pids.max. A counter whose cgroup is gone reads as missing."""
        if not self._counters_open:
            self._open_counters()
        files = counter_files(self.layout.version)
        out: dict[str, int] = {}
        for key, fd in self._counter_fds.items():
            with contextlib.suppress(OSError):
                out[key] = parse_counter(os.pread(fd, 4096, 0).decode(), files[key.rpartition(".")[2]][2])
        for prefix in ("", f"{cgsetup.AGENT}.", f"{cgsetup.VERIFIER}."):
            if prefix + "memory_max" in out:
                peak = out.get(prefix + "memory_limit", 0)
                out[prefix + "memory_limit"] = int(peak >= out.pop(prefix + "memory_max") - PEAK_SLACK)
        return out

    def reset_peak(self) -> None:
        """Start the v1 memory usage watermark afresh (a reset sandbox: `memory_limit` reads 0 again)."""
        if self.layout.version == 1 and "memory" in self.dirs:
            for directory in [
                self.dirs["memory"],
                *self.scope_dirs(cgsetup.AGENT),
                *self.scope_dirs(cgsetup.VERIFIER),
            ]:
                with contextlib.suppress(OSError):
                    (directory / "memory.max_usage_in_bytes").write_text("0")

    def pids(self) -> list[int]:
        """Every process currently in the sandbox's cgroup (its children's included)."""
        anchor = self.dirs.get("pids") or self.dirs.get("memory")
        if anchor is None:
            return []
        found = _procs(anchor)
        if "pids" in self.nested or "memory" in self.nested:
            for scope in cgsetup.SCOPES:
                found += _procs(anchor / scope)
        return found

    def kill_all(self, *, freeze: bool = True) -> None:
        """SIGKILL every process in the cgroup (freezing first on v1 so nothing forks in between;
        `freeze=False` when the sandbox's pid namespace is already going away: no fork can succeed there)."""
        if not self.pids():
            return  # the usual case at stop(): the pid namespace died with its init
        freezer = self.dirs.get("freezer") if freeze else None
        if freezer is not None:
            with contextlib.suppress(OSError):
                (freezer / "freezer.state").write_text("FROZEN")
        if self.layout.version == 2 and "pids" in self.dirs and (self.dirs["pids"] / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                (self.dirs["pids"] / "cgroup.kill").write_text("1")
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if freezer is not None:
            with contextlib.suppress(OSError):
                (freezer / "freezer.state").write_text("THAWED")

    def try_remove(self) -> bool:
        """Remove the directories; False while processes remain in them."""
        for fd in self._counter_fds.values():
            os.close(fd)
        self._counter_fds.clear()
        done = True
        for path in reversed(self.dir_paths()):  # children first
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                done = False
        return done


def _procs(directory: Path) -> list[int]:
    """The pids in one cgroup directory's cgroup.procs (none when it cannot be read)."""
    try:
        fd = os.open(f"{directory}/cgroup.procs", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        data = b""
        while chunk := os.read(fd, 65536):
            data += chunk
    except OSError:
        return []
    finally:
        os.close(fd)
    return [int(x) for x in data.split()]


def remove_cgroup_dirs(cg: SandboxCgroup, timeout: float = 5.0) -> bool:
    """Kill what remains and remove the directories, retrying while the kernel finishes (blocking)."""
    deadline = time.monotonic() + timeout
    while True:
        if cg.pids():
            cg.kill_all()
        if cg.try_remove():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)  # the kernel is still releasing the last exited tasks: usually well under 1 ms


def stale_cgroups() -> list[SandboxCgroup]:
    """Sandbox cgroups whose owning process is gone (left behind by a SIGKILLed orchestrator)."""
    layout = detect_layout()
    names: set[str] = set()
    for parent in layout.parents.values():
        with contextlib.suppress(OSError):
            names.update(p.name for p in parent.iterdir() if p.name.startswith(PREFIX) and p.is_dir())
    stale = []
    for name in sorted(names):
        owner = name[len(PREFIX) :].split("-", 1)[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            stale.append(SandboxCgroup(layout, name))
    return stale
