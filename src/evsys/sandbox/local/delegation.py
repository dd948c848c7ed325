"""cgroup v2 delegation: which controllers evsys may use below the cgroup it was started in.

In a container, a Kubernetes pod (KubeRay) or a VM, the orchestrator's own cgroup is what it was given, and
only some controllers may be delegated to it (`cgroup.controllers` of that cgroup, not of the root). A
sandbox's cgroup is a child of the orchestrator's cgroup, so a controller is usable when it is listed in the
orchestrator cgroup's `cgroup.subtree_control`, or can be added there. cgroup v2 refuses that (EBUSY) while
processes live in the cgroup itself (the "no internal processes" rule, the root cgroup excepted): evsys then
moves itself into a leaf child, `evsys-orchestrator`, and tries again. Processes it did not start are left
where they are; when they still block the controllers, the reason says so.

What a missing controller means for sandboxes (see `Fallback`): pids falls back to RLIMIT_NPROC of the
sandbox's own agent uid (uids.py); memory and cpu limits are not enforced, and `evsys doctor` says so.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

LEAF = "evsys-orchestrator"  # the orchestrator's own leaf below the cgroup it was started in
WANTED = ("memory", "pids", "cpu")


def _words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def delegated_base(root: Path, own_path: str) -> Path:
    """The cgroup sandboxes go below: the orchestrator's own, or its parent when it already sits in the leaf
    evsys moves it to (a forked worker, or detection running a second time)."""
    own = root / own_path.lstrip("/")
    return own.parent if own.name == LEAF else own


def _enable(base: Path, ctrl: str) -> int:
    """Add `ctrl` to base's subtree_control; 0 or the errno of the refusal."""
    try:
        (base / "cgroup.subtree_control").write_text(f"+{ctrl}")
    except OSError as exc:
        return exc.errno or errno.EIO
    return 0


def _move_into_leaf(base: Path) -> str | None:
    """Move this process into `base/evsys-orchestrator`; None, or why it could not."""
    leaf = base / LEAF
    try:
        leaf.mkdir(exist_ok=True)
        (leaf / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as exc:
        return f"cannot move evsys into the leaf cgroup {leaf}: {exc.strerror}"
    return None


def _others(base: Path) -> list[int]:
    return [int(pid) for pid in _words(base / "cgroup.procs") if pid.isdigit()]


def enable_controllers(root: Path, own_path: str) -> tuple[Path, list[str], dict[str, str]]:
    """Enable every controller of WANTED that `own_path`'s cgroup offers in its subtree_control (moving this
    process into a leaf when the no-internal-processes rule requires it). Returns the base cgroup, the
    controllers sandboxes get there, and controller -> why it is not available."""
    base = delegated_base(root, own_path)
    offered = set(_words(base / "cgroup.controllers"))
    why: dict[str, str] = {}
    for ctrl in WANTED:
        if ctrl not in offered:
            why[ctrl] = f"not delegated to evsys's cgroup {base} (its cgroup.controllers: {sorted(offered)})"
    missing = [c for c in WANTED if c in offered and c not in _words(base / "cgroup.subtree_control")]
    moved, blocked = False, ""
    for ctrl in missing:
        code = _enable(base, ctrl)
        if code == errno.EBUSY and not moved:  # processes in base: evsys moves itself out, once
            moved, blocked = True, _move_into_leaf(base) or ""
            code = _enable(base, ctrl)
        if code == errno.EBUSY:
            pids = [p for p in _others(base) if p != os.getpid()][:5]
            why[ctrl] = blocked or (
                f"cgroup {base} holds other processes ({', '.join(map(str, pids))}); cgroup v2 delegates "
                "no controller from a cgroup with processes: start evsys in a cgroup of its own"
            )
        elif code:
            why[ctrl] = f"cannot enable it in {base}/cgroup.subtree_control: {os.strerror(code)}"
    usable = [c for c in WANTED if c not in why]
    return base, usable, why
