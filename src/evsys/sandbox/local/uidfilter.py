"""Which host uids root inside a local sandbox may take: a seccomp argument filter on the set*id calls.

The sandbox's user namespace maps every id to itself (uids.py), so a uid inside is the same uid on the host,
with its file permissions and the counters the kernel keeps per host uid alone (pipe pages, epoll watches).
Root inside keeps CAP_SETUID (images run services as `postgres`, `www-data`,
`nobody`...), so without this filter it could become any host uid: a host user's, or another sandbox's
agent's, and act with that uid's permissions. With it, `setuid`, `setgid`, `setreuid`, `setregid`,
`setresuid`, `setresgid`, `setfsuid` and `setfsgid` fail with EPERM unless every id they are given is

* 0 (root), one of the sandbox's own uids (its block: the agent's and its extra users', `uids.py`), or -1
  ("unchanged");
* a system id below 1000, or 65534 (`nobody`): what images run their services as.

Host login users (1000 and up) and other sandboxes' agents (evsys allocates them from 100000) are out of
reach. System ids and `nobody` are still shared with the host's system users and with other sandboxes'
services, though their ucounts quotas (inotify, processes, message queues) are per sandbox: see
docs/sandbox.md's threat model. Supplementary groups (`setgroups`, a pointer the filter cannot
read) are not filtered; no kernel quota is kept per group.

The program is classic BPF put ahead of the shared filter (`seccomp.py`): anything it does not refuse falls
through to that filter's first instruction. It is a few dozen instructions, built per sandbox (the agent uid
is in it) in microseconds. x86_64 only; elsewhere the filter is empty (documented).
"""

from __future__ import annotations

import errno
import platform
import struct

SYSTEM_IDS_BELOW = 1000
NOBODY = 65534
UNCHANGED = 0xFFFFFFFF
AUDIT_ARCH_X86_64 = 0xC000003E
# x86_64 numbers of the calls, by how many ids they take
SET_ID_CALLS = {1: (105, 106, 122, 123), 2: (113, 114), 3: (117, 119)}

_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JA = 0x05  # BPF_JMP | BPF_JA
_RET = 0x06  # BPF_RET | BPF_K
_RET_EPERM = 0x00050000 | errno.EPERM  # SECCOMP_RET_ERRNO
_NR, _ARCH = 0, 4
_ARGS = 16  # seccomp_data.args[0]; each 8 bytes, the low word first (little-endian)


def _insn(code: int, k: int = 0, jt: int = 0, jf: int = 0) -> tuple[int, int, int, int]:
    return code, jt, jf, k


def _check_id(arg: int, own: range) -> list[tuple[int, int, int, int]]:
    """Refuse (EPERM) unless argument `arg` is an allowed id; else fall through past the block."""
    low, high = _ARGS + 8 * arg, _ARGS + 8 * arg + 4
    return [
        _insn(_LD_ABS, high),
        _insn(_JEQ, 0, jt=0, jf=6),  # high bits set: refuse
        _insn(_LD_ABS, low),
        _insn(_JEQ, UNCHANGED, jt=5),
        _insn(_JEQ, NOBODY, jt=4),
        _insn(_JGE, own.stop, jt=2),  # above the sandbox's block: refuse
        _insn(_JGE, own.start, jt=2),  # in the block
        _insn(_JGE, SYSTEM_IDS_BELOW, jt=0, jf=1),
        _insn(_RET, _RET_EPERM),  # every jump above lands here (refuse) or just past it (allowed)
    ]


def uid_filter(own: range) -> bytes:
    """The BPF instructions (struct sock_filter, native byte order) of the set*id filter for a sandbox whose
    own uids are `own` (its block, above SYSTEM_IDS_BELOW); b"" off x86_64."""
    if platform.machine() != "x86_64":
        return b""
    assert own.start >= SYSTEM_IDS_BELOW and own.step == 1
    checks = [_check_id(arg, own) for arg in (2, 1, 0)]  # setres* enter at arg 2, setre* at 1
    entry = {3: 0, 2: len(checks[0]), 1: len(checks[0]) + len(checks[1])}
    calls = [(nr, arity) for arity, nrs in SET_ID_CALLS.items() for nr in nrs]
    head = [_insn(_LD_ABS, _ARCH)]
    body_len = 1 + len(calls) + 1 + sum(len(c) for c in checks) + 1  # ld nr, jeqs, ja, checks, ja
    head.append(_insn(_JEQ, AUDIT_ARCH_X86_64, jt=0, jf=body_len))  # other arches: the shared filter decides
    head.append(_insn(_LD_ABS, _NR))
    for index, (nr, arity) in enumerate(calls):
        to_block = len(calls) - index  # the jeqs left after this one, then the ja
        head.append(_insn(_JEQ, nr, jt=to_block + entry[arity]))
    tail_len = sum(len(c) for c in checks)
    head.append(_insn(_JA, tail_len + 1))  # not a set*id call: past the checks and the last ja
    program = head + [insn for block in checks for insn in block] + [_insn(_JA, 0)]
    return b"".join(struct.pack("=HBBI", *insn) for insn in program)
