"""Red team: root inside a sandbox taking a host uid that is not the sandbox's.

Root keeps CAP_SETUID (images run services as system users), and a uid inside is the host's (the sandbox's
user namespace maps every id to itself). So root could become a host login user (1000) or another sandbox's
agent and take that uid's uid-based permissions. The set*id filter (sandbox/local/uidfilter.py) allows only
the sandbox's own uids (root, its block: its agent's and its extra users'), system ids below 1000 and nobody.
The uids it allows are shared by every sandbox, but their kernel quotas are not: the sandbox's user namespace,
owned by its agent uid, counts them per sandbox (uids.py). Each test first shows the attack works where it
is aimed at the attacker's own sandbox."""

from __future__ import annotations

import ctypes
import os

import pytest
from inotify_hog import HOG, ONE_INOTIFY, QUOTA_ERRNO, QUOTA_HOG, run_hog, run_quota_hog

from evsys.sandbox.local import uids

pytestmark = pytest.mark.security

# python3 as root: try each call, print "ok" or the errno name
TRY_IDS = """
import errno, os, sys
target = int(sys.argv[1])
for name, call in [
    ("setuid", lambda: os.setuid(target)),
    ("setgid", lambda: os.setgid(target)),
    ("setreuid", lambda: os.setreuid(-1, target)),
    ("setresuid", lambda: os.setresuid(target, target, target)),
    ("setresgid", lambda: os.setresgid(-1, target, -1)),
]:
    pid = os.fork()
    if pid == 0:
        try:
            call()
            print(name, "ok", flush=True)
        except OSError as exc:
            print(name, errno.errorcode[exc.errno], flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
"""


def outcomes(stdout: str) -> set[str]:
    """The distinct outcomes (`ok`, `EPERM`) of every call TRY_IDS made."""
    lines = [line.split() for line in stdout.splitlines()]
    assert len(lines) == 5, stdout
    return {outcome for _, outcome in lines}


async def try_ids(sandbox, uid: int) -> set[str]:
    r = await sandbox.exec(
        f"cat > /tmp/try.py; python3 /tmp/try.py {uid}", user="root", stdin=TRY_IDS.encode()
    )
    return outcomes(r.stdout)


async def test_root_can_take_only_the_sandboxes_own_uids(make_sandbox):
    sb, other = await make_sandbox(), await make_sandbox()
    # positive controls: root, the agent's uid, an extra user's (a shared slot's), a system user (www-data)
    # and nobody are allowed
    for uid in (0, sb.agent_uid, sb.extra_uid(0), 33, 65534):
        assert await try_ids(sb, uid) == {"ok"}, uid
    # a host login user, another sandbox's agent or extra user, the uid past the sandbox's block, a high uid
    for uid in (1000, other.agent_uid, other.extra_uid(0), sb.extra_uid(uids.UID_BLOCK - 2) + 1, 4_000_000):
        assert await try_ids(sb, uid) == {"EPERM"}, uid


async def test_root_in_one_sandbox_cannot_take_another_sandboxes_inotify_instances(make_sandbox):
    hog, victim = await make_sandbox(), await make_sandbox()
    # positive control: root in the hog sandbox switches to its own agent's uid and takes every inotify
    # instance that uid may have (EMFILE = 24): the hog works, and starves its own agent
    own = (await hog.exec(run_hog(hog.agent_uid), user="root", stdin=HOG)).stdout.split()
    assert len(own) == 2 and int(own[0]) > 0 and own[1] == "24", own
    assert (await hog.exec(ONE_INOTIFY)).stdout.split() == ["-1"]
    # the same hog aimed at the victim's agent uid, and at a host login user, cannot become them
    for uid in (victim.agent_uid, 1000):
        await hog.exec("rm -f /tmp/hog.out", user="root")
        r = await hog.exec(run_hog(uid), user="root", stdin=HOG)
        assert r.stdout.split() == ["setuid-failed", "1"], (uid, r.stdout, r.stderr)
    assert int((await victim.exec(ONE_INOTIFY)).stdout) >= 0  # the victim's agent is not starved


async def quota(sandbox, kind: str, uid: int, *, hold: bool = False) -> tuple[int, int]:
    """How much of `kind` (QUOTA_HOG) root in `sandbox` takes as `uid`, and the errno that stopped it."""
    r = await sandbox.exec(run_quota_hog(kind, uid, hold=hold), user="root", stdin=QUOTA_HOG)
    count, err = r.stdout.split()
    return int(count), int(err)


# nobody and www-data (allowed to root in every sandbox), and root itself (root's processes are exempt from
# RLIMIT_NPROC: no process case). Without the sandbox's user namespace root's quota was also the host root's.
QUOTA_CASES = [(kind, uid) for kind in sorted(QUOTA_ERRNO) for uid in (65534, 33)]
QUOTA_CASES += [("inotify", 0), ("mqueue", 0)]


@pytest.mark.parametrize(("kind", "uid"), QUOTA_CASES)
async def test_a_sandbox_holding_a_uids_quota_leaves_every_other_sandbox_the_full_quota(
    make_sandbox, kind, uid
):
    hog, victim = await make_sandbox(), await make_sandbox()
    taken, err = await quota(hog, kind, uid, hold=True)
    # positive control: the hog took all of the quota it may have: the same uid in its own sandbox gets none
    assert taken > 0 and err == QUOTA_ERRNO[kind], (taken, err)
    assert await quota(hog, kind, uid) == (0, QUOTA_ERRNO[kind])
    # the same uid in another sandbox, at the same time, still gets all of it
    assert await quota(victim, kind, uid) == (taken, QUOTA_ERRNO[kind])


async def test_root_in_a_sandbox_cannot_take_the_host_roots_inotify_instances(make_sandbox):
    hog = await make_sandbox()
    taken, err = await quota(hog, "inotify", 0, hold=True)
    # positive control: root in the sandbox holds every inotify instance it may have
    assert taken > 0 and err == QUOTA_ERRNO["inotify"], (taken, err)
    assert await quota(hog, "inotify", 0) == (0, QUOTA_ERRNO["inotify"])
    # the host's root (this orchestrator) still gets one: sandboxes' roots no longer share its quota
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init()
    assert fd >= 0, os.strerror(ctypes.get_errno())
    os.close(fd)
