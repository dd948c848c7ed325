"""The seccomp filter every local sandbox runs under, compiled to a BPF program for `bwrap --seccomp FD`.

Default allow; the system calls below fail with EPERM (clone3 with ENOSYS so libc falls back to clone, whose
namespace flags are checked). They cover debugging other processes, changing mounts or namespaces, kernel
modules, kexec, keyrings, eBPF, perf, userfaultfd, cross-process memory access, handle-based opens and
swap/reboot.

Mounts: only the steps of a verification run's private mounts pass the filter (native/verifier.c):
`unshare(CLONE_NEWNS)`, `mount` making propagation private, `fsopen`/`fsconfig`/`fsmount`, `open_tree`
cloning one mount (not recursively: the verifier's /etc/ld.so.preload) and `move_mount` of a detached mount
onto an fd. Each also needs CAP_SYS_ADMIN, which only the daemon holds (it is in no
process's bounding set), so for every other process they fail with EPERM as before.

`prlimit64` setting a limit of pid 1 (the daemon, whose limits every command inherits) fails with EPERM.

Ahead of this program, `uidfilter.py` puts the per-sandbox filter on the set*id calls.

socket(2) is allowed only for the address families a task needs: AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK
with the NETLINK_ROUTE protocol (what `ip` and getaddrinfo use). Every other family (AF_VSOCK, which reaches
the VM's host port space even without a network; AF_PACKET; AF_BLUETOOTH...) fails with EAFNOSUPPORT, other
netlink protocols with EPROTONOSUPPORT, as on a kernel built without them, so programs fall back quietly.
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile
from types import ModuleType
from typing import Any

from evsys.sandbox.local.uidfilter import uid_filter

DENIED_SYSCALLS = (
    "ptrace",
    "umount2",
    "fspick",
    "mount_setattr",
    "pivot_root",
    "chroot",
    "setns",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "process_vm_readv",
    "process_vm_writev",
    "open_by_handle_at",
    "name_to_handle_at",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "quotactl",
    "lookup_dcookie",
    "iopl",
    "ioperm",
    "syslog",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "vhangup",
    "nfsservctl",
    "personality",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kcmp",
    "pidfd_getfd",
)
# clone(2) flags that create namespaces; clone with any of them is refused.
CLONE_NAMESPACE_FLAGS = (
    0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
)
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
ALLOWED_FAMILIES = (AF_UNIX, AF_INET, AF_INET6, AF_NETLINK)
NETLINK_ROUTE = 0
# families above this are all refused by one comparison (AF_VSOCK is 40); the ones below it one by one
_FIRST_UNLISTED_FAMILY = max(ALLOWED_FAMILIES) + 1
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
CLONE_NEWNS = 0x00020000
MS_PRIVATE_REC = 0x40000 | 0x4000  # MS_PRIVATE | MS_REC
MOVE_MOUNT_EMPTY_PATHS = 0x04 | 0x40  # MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH
OPEN_TREE_CLONE_CLOEXEC = 0x1 | os.O_CLOEXEC  # a one-file bind: the verifier's /etc/ld.so.preload


@functools.cache
def seccomp_bpf() -> bytes:
    """The compiled filter (cached per process)."""
    import pyseccomp as sc

    filt = sc.SyscallFilter(sc.ALLOW)
    deny = sc.ERRNO(errno.EPERM)
    for name in DENIED_SYSCALLS:
        try:
            filt.add_rule(deny, name)
        except (OSError, ValueError, RuntimeError):
            continue  # not a syscall on this architecture
    filt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for bit in _bits(CLONE_NAMESPACE_FLAGS):
        filt.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, bit, bit))
    filt.add_rule(deny, "unshare", sc.Arg(0, sc.NE, CLONE_NEWNS))
    filt.add_rule(deny, "mount", sc.Arg(3, sc.NE, MS_PRIVATE_REC))
    filt.add_rule(deny, "move_mount", sc.Arg(4, sc.NE, MOVE_MOUNT_EMPTY_PATHS))
    filt.add_rule(deny, "open_tree", sc.Arg(2, sc.NE, OPEN_TREE_CLONE_CLOEXEC))  # never recursive
    for request in (TIOCSTI, TIOCLINUX):
        filt.add_rule(deny, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, request))
    # pid 1 (the daemon) passes its rlimits on to every command: none may lower them (native/inherited.c);
    # the pid is compared as the kernel reads it, 32 bits
    filt.add_rule(deny, "prlimit64", sc.Arg(0, sc.MASKED_EQ, 0xFFFFFFFF, 1), sc.Arg(2, sc.NE, 0))
    _socket_rules(filt, sc)
    with tempfile.TemporaryFile() as f:
        filt.export_bpf(f)
        f.seek(0)
        return f.read()


def _socket_rules(filt: Any, sc: ModuleType) -> None:  # pyseccomp has no types
    """Refuse socket(2) for every address family outside ALLOWED_FAMILIES and every netlink protocol but
    NETLINK_ROUTE. The family is compared as a 64-bit value: one with high bits set is refused too."""
    no_family = sc.ERRNO(errno.EAFNOSUPPORT)
    filt.add_rule(no_family, "socket", sc.Arg(0, sc.GE, _FIRST_UNLISTED_FAMILY))
    for family in range(_FIRST_UNLISTED_FAMILY):
        if family not in ALLOWED_FAMILIES:
            filt.add_rule(no_family, "socket", sc.Arg(0, sc.EQ, family))
    no_protocol = sc.ERRNO(errno.EPROTONOSUPPORT)
    filt.add_rule(no_protocol, "socket", sc.Arg(0, sc.EQ, AF_NETLINK), sc.Arg(2, sc.NE, NETLINK_ROUTE))


def _bits(mask: int) -> list[int]:
    return [1 << i for i in range(64) if mask & (1 << i)]


@functools.lru_cache(maxsize=4096)  # per uid block (at most 1,875 of them): built once, not per start
def _program(own_uids: range) -> bytes:
    return uid_filter(own_uids) + seccomp_bpf()


def seccomp_fd(own_uids: range) -> int:
    """A readable fd holding the sandbox's BPF program: its set*id filter (`uidfilter.py`, for the sandbox's
    own uids) ahead of the shared filter (a pipe; caller closes it after spawning bwrap)."""
    data = _program(own_uids)
    r, w = os.pipe()
    try:
        os.write(w, data)
    finally:
        os.close(w)
    return r
