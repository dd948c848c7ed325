"""What the local sandbox can use on this machine: what works, what is degraded, and the fix."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from evsys.records import SandboxSpec
from evsys.sandbox.local import cgroups, cgsetup, limits, native
from evsys.util.text import head_words


@dataclass
class Check:
    """One finding. `required`: the local sandbox cannot run when this check fails."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def missing_requirement() -> str | None:
    """Why the local sandbox cannot run here at all (no bubblewrap, capabilities, user namespaces or
    overlayfs), or None: checked before anything starts, so a start fails at once with the reason instead
    of hanging."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed; run `evsys doctor`"
    for check in (check_capabilities(), check_user_namespaces(), check_overlay()):
        if not check.ok:
            return f"{check.name}: {check.detail} (fix: {check.fix}); run `evsys doctor`"
    return None


_MISSING: dict[int, str | None] = {}  # pid -> missing_requirement(), checked once per process


def missing_requirement_once() -> str | None:
    """`missing_requirement()`, checked once per process (every sandbox start asks)."""
    if os.getpid() not in _MISSING:
        _MISSING[os.getpid()] = missing_requirement()
    return _MISSING[os.getpid()]


def required_problems() -> str | None:
    """`missing_requirement()`, else the failing required checks with their fixes in one line, or None."""
    missing = missing_requirement()
    if missing is not None:
        return missing.removesuffix("; run `evsys doctor`")
    failed = [c for c in run_checks(smoke=False) if c.required and not c.ok]
    if not failed:
        return None
    return "; ".join(f"{c.name}: {c.detail} (fix: {c.fix})" for c in failed)


def check_root() -> Check:
    """Overlay mounts and cgroup directories need root on the host."""
    ok = os.geteuid() == 0
    return Check(
        "root", ok, "running as root" if ok else f"running as uid {os.geteuid()}", "run evsys as root"
    )


def check_bwrap() -> Check:
    """bubblewrap must be installed (0.8 or newer)."""
    path = shutil.which("bwrap") or ("/usr/bin/bwrap" if Path("/usr/bin/bwrap").exists() else None)
    if path is None:
        return Check("bubblewrap", False, "bwrap not found", "apt-get install bubblewrap")
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    return Check("bubblewrap", True, f"{out or 'bwrap'} at {path}")


def check_python() -> Check:
    """The sandbox spawner runs on the system Python (stdlib only)."""
    ok = Path("/usr/bin/python3").exists()
    return Check(
        "system python3", ok, "/usr/bin/python3" if ok else "missing", "apt-get install python3-minimal"
    )


def check_daemon() -> Check:
    """The in-sandbox exec daemon is a small static C program built from evsys's sources on first use."""
    from evsys.sandbox.base import SandboxError
    from evsys.sandbox.local.sandbox import default_scratch_root

    try:
        built = native.daemon_dir(default_scratch_root() / "layers") / native.BINARY_NAME
    except (SandboxError, OSError) as exc:
        return Check("exec daemon", False, head_words(str(exc), 300), native.INSTALL_HINT)
    return Check("exec daemon", True, f"built with {native.compiler()}: {built}")


def check_network_tools() -> list[Check]:
    """Host tools of the networking modes (optional: no-network sandboxes need neither): slirp4netns for
    `public` and `allowlist`, nftables for `allowlist`."""
    from evsys.sandbox.base import SandboxError
    from evsys.sandbox.local import allowlist, slirp

    checks = []
    for name, find, hint, modes in (
        ("slirp4netns", slirp.slirp_binary, slirp.INSTALL_HINT, "public and allowlist networking"),
        ("nftables", allowlist.nft_binary, allowlist.INSTALL_HINT, "allowlist networking"),
    ):
        try:
            checks.append(Check(name, True, f"{find()} ({modes})", required=False))
        except SandboxError:
            checks.append(Check(name, False, f"not found: {modes} fails", hint, required=False))
    return checks


def check_overlay() -> Check:
    """overlayfs must be available to the kernel."""
    filesystems = Path("/proc/filesystems").read_text()
    ok = "\toverlay\n" in filesystems
    return Check(
        "overlayfs",
        ok,
        "kernel supports overlay" if ok else "no overlay in /proc/filesystems",
        "modprobe overlay",
    )


def check_cgroups() -> list[Check]:
    """The cgroup version and controllers evsys uses, then which sandbox limits hold and by what (limits.py):
    a limit the cgroups cannot enforce is degraded, never a refusal."""
    try:
        layout = cgroups.detect_layout()
    except OSError as exc:
        return [Check("cgroups", False, f"cannot read cgroups: {exc}", "mount cgroup v2 or v1 hierarchies")]
    found = ", ".join(f"{c} at {p}" for c, p in sorted(layout.parents.items())) or "none usable"
    checks = [Check(f"cgroups v{layout.version}", True, f"controllers: {found}", required=False)]
    fix = "delegate the controller to evsys's cgroup (v2: +{0} in the parent's cgroup.subtree_control and "
    fix += "evsys alone in its cgroup; a container: --cgroupns=private with {0} delegated; v1: mount it)"
    for hold in limits.limit_holds(layout):
        detail = f"enforced by {hold.by}" if hold.enforced else ""
        detail = "; ".join(part for part in (detail, hold.note) if part)
        ctrl = {"memory_mb": "memory", "pids_max": "pids", "cpus": "cpu"}[hold.limit]
        checks.append(Check(f"{hold.limit} limit", hold.by_cgroup, detail, fix.format(ctrl), required=False))
    checks += check_headroom(layout)
    if layout.version == 1:
        ok = "freezer" in layout.parents
        effect = "freezing before kill" if ok else "missing: kills still work, without freezing first"
        hint = "" if ok else fix.format("freezer")
        checks.append(Check("cgroup freezer", ok, effect, hint, required=False))
    return checks


CAP_SYS_RESOURCE = 24


def check_headroom(layout: cgroups.CgroupLayout) -> list[Check]:
    """Whether bubblewrap, the daemon and a verification run keep headroom the agent cannot take: the nested
    memory and pids cgroups (cgsetup.py), and whether the daemon's oom_score_adj -1000 can be set at all."""
    missing = [c for c in cgsetup.NESTED if c not in layout.parents]
    if missing:
        why = "; ".join(layout.missing.get(c, f"no {c} controller") for c in missing)
        detail = f"NOT SET: no nested {'/'.join(missing)} cgroups ({why}): an agent at its limit can starve "
        detail += "the verifier or get the sandbox OOM-killed"
        headroom = Check("machinery headroom", False, detail, "make the memory and pids controllers usable")
    else:
        detail = "bubblewrap and the daemon outside the agent's memory and pids limits; verifier apart"
        headroom = Check("machinery headroom", True, detail)
    status = Path("/proc/self/status").read_text()
    effective = int(next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")), 16)
    settable = bool(effective >> CAP_SYS_RESOURCE & 1)
    note = "set" if settable else "NOT SET (no CAP_SYS_RESOURCE)"
    note += "; the nested cgroups keep the daemon from the agent's OOM kills" if headroom.ok else ""
    fix = "" if settable else "--cap-add SYS_RESOURCE, or make the memory and pids controllers usable"
    score = Check("daemon oom_score_adj -1000", settable or headroom.ok, note, fix)
    for check in (headroom, score):
        check.required = False
    return [headroom, score]


def check_seccomp() -> Check:
    """The kernel supports seccomp filters and pyseccomp can compile evsys's filter."""
    status = Path("/proc/self/status").read_text()
    if "Seccomp:" not in status:
        return Check("seccomp", False, "kernel without seccomp", "use a kernel with CONFIG_SECCOMP_FILTER")
    try:
        from evsys.sandbox.local.seccomp import DENIED_SYSCALLS, seccomp_bpf

        size = len(seccomp_bpf())
    except Exception as exc:
        return Check(
            "seccomp",
            False,
            f"cannot compile the filter: {exc}",
            "pip install pyseccomp; apt-get install libseccomp2",
        )
    return Check("seccomp", True, f"{len(DENIED_SYSCALLS)} syscalls denied ({size} bytes of BPF)")


# Capability numbers (linux/capability.h) of what the sandbox's setup, daemon and root need; a container
# runtime grants fewer by default (docs/sandbox.md: running evsys in a container).
CAPABILITY_BITS = {
    "CAP_CHOWN": 0,
    "CAP_DAC_OVERRIDE": 1,
    "CAP_FOWNER": 3,
    "CAP_FSETID": 4,
    "CAP_KILL": 5,
    "CAP_SETGID": 6,
    "CAP_SETUID": 7,
    "CAP_SETPCAP": 8,
    "CAP_SYS_PTRACE": 19,  # the host reads the non-dumpable daemon's /proc entries
    "CAP_SYS_ADMIN": 21,
    "CAP_WAKE_ALARM": 35,  # the verification mark (native/verifier.c)
}


def check_capabilities() -> Check:
    """The capabilities evsys needs are in this process's bounding set (a container may lack some)."""
    status = Path("/proc/self/status").read_text()
    bounding = int(next(line.split()[1] for line in status.splitlines() if line.startswith("CapBnd:")), 16)
    lacking = [name for name, bit in CAPABILITY_BITS.items() if not bounding >> bit & 1]
    detail = f"lacking {', '.join(lacking)}" if lacking else "every capability the sandbox needs"
    fix = "give the container " + " ".join(f"--cap-add {n.removeprefix('CAP_')}" for n in lacking)
    fix = fix if lacking else ""
    return Check("capabilities", not lacking, detail, fix)


def check_user_namespaces() -> Check:
    """The host must be able to create user namespaces: each sandbox's idmapped layers use one (its agent's
    own uid, native/idmap.c), and each sandbox runs in one of its own, owned by its agent uid, so per-user
    kernel quotas are counted per sandbox (uids.py). Sandboxes cannot create any."""
    path = Path("/proc/sys/user/max_user_namespaces")
    value = path.read_text().strip() if path.exists() else "unknown"
    ok = value != "0"
    detail = f"max_user_namespaces={value}; each sandbox runs in one and idmaps its layers with another"
    return Check("user namespaces", ok, detail, "sysctl -w user.max_user_namespaces=15000")


LINK_SYSCTLS = ("protected_symlinks", "protected_hardlinks", "protected_regular")
SYSCTL_FS = Path("/proc/sys/fs")


def check_link_protections() -> Check:
    """The kernel's link protections (fs.protected_*): off, root following a link or opening a file another
    user planted in a world-writable sticky directory (/tmp, /dev/shm) is not stopped. The verifier has its
    own /tmp either way (native/verifier.c); other places task code writes as root rely on the sysctls."""
    values = {}
    for name in LINK_SYSCTLS:
        path = SYSCTL_FS / name
        values[name] = path.read_text().strip() if path.exists() else "unknown"
    off = [name for name, value in values.items() if value == "0"]
    detail = ", ".join(f"fs.{name}={value}" for name, value in values.items())
    if off:
        detail += "; off: root in a sandbox follows links other users plant in /tmp-like directories"
    fix = "sysctl -w " + " ".join(f"fs.{name}=1" for name in off) if off else ""
    return Check("link protections", not off, detail, fix, required=False)


def check_smoke() -> Check:
    """Start a real sandbox, run a command, stop it."""
    from evsys.sandbox.local.sandbox import LocalSandbox

    async def run() -> str:
        t0 = time.perf_counter()
        async with LocalSandbox(SandboxSpec(name=f"doctor-{os.getpid()}")) as sb:
            result = await sb.exec("echo ok; id -un")
        if result.stdout.split() != ["ok", "agent"]:
            raise RuntimeError(f"unexpected output {result.stdout!r} {result.stderr!r}")
        return f"start + exec + stop in {(time.perf_counter() - t0) * 1000:.0f} ms"

    try:
        return Check("sandbox smoke test", True, asyncio.run(run()))
    except Exception as exc:
        return Check(
            "sandbox smoke test",
            False,
            head_words(str(exc), 300),
            "fix the failures above, then re-run evsys doctor",
        )


def run_checks(*, smoke: bool = True) -> list[Check]:
    """Every check, in display order; the smoke test only when the basics pass."""
    checks = [check_root(), check_capabilities(), check_bwrap(), check_python(), check_daemon()]
    checks += [check_overlay(), *check_cgroups()]
    checks += check_network_tools()
    checks.append(check_seccomp())
    checks.append(check_user_namespaces())
    checks.append(check_link_protections())
    if smoke and all(c.ok for c in checks if c.required):
        checks.append(check_smoke())
    return checks
