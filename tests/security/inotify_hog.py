"""A program that takes every inotify instance its uid may hold, for the per-uid kernel quota tests.

`run_hog(uid)` is the shell command that starts it detached (as the exec's user, or after switching to `uid`
when started as root) and prints how many instances it took and the errno that stopped it — or
`setuid-failed ERRNO` when the switch was refused. `ONE_INOTIFY` prints one more `inotify_init()`'s result.
`run_quota_hog(kind, uid)` does the same for inotify instances, processes or message queue bytes, as any uid.
"""

from __future__ import annotations

HOG = b"""
import ctypes, os, sys, time
if len(sys.argv) > 1:
    os.setgroups([])
    try:
        os.setuid(int(sys.argv[1]))
    except OSError as exc:
        print("setuid-failed", exc.errno, flush=True)
        sys.exit(0)
libc = ctypes.CDLL(None, use_errno=True)
count = 0
while libc.inotify_init() >= 0:
    count += 1
print(count, ctypes.get_errno(), flush=True)
time.sleep(60)
"""
ONE_INOTIFY = "python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); print(l.inotify_init())'"


def run_hog(uid: int | None = None) -> str:
    """The command that starts `HOG` (given on stdin) detached and prints its first line."""
    arg = "" if uid is None else f" {uid}"
    return (
        f"cat > /tmp/hog.py; setsid nohup python3 /tmp/hog.py{arg} > /tmp/hog.out 2>&1 &"
        " for i in $(seq 100); do [ -s /tmp/hog.out ] && break; sleep 0.1; done; cat /tmp/hog.out"
    )


# python3 as root: become uid argv[2] (its group too) and take all it may of one per-user kernel quota
# (argv[1]): inotify instances, processes under an RLIMIT_NPROC of 64, or POSIX message queue bytes (queues
# of 80 KiB); print how many it took and the errno that stopped it; with argv[3] == "hold", keep them for a
# minute.
QUOTA_HOG = b"""
import ctypes, os, resource, signal, sys, time
kind, uid, hold = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "hold"
os.setgroups([])
os.setgid(uid)
os.setuid(uid)
libc = ctypes.CDLL(None, use_errno=True)
count, err, children = 0, 0, []
if kind == "inotify":
    while libc.inotify_init() >= 0:
        count += 1
    err = ctypes.get_errno()
elif kind == "procs":
    resource.setrlimit(resource.RLIMIT_NPROC, (64, 64))
    while count < 200:
        try:
            pid = os.fork()
        except OSError as exc:
            err = exc.errno
            break
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
        count += 1
elif kind == "mqueue":
    attr = (ctypes.c_long * 8)(0, 10, 8192, 0)
    while count < 1000:
        name = f"/evsys-hog-{os.getpid()}-{count}".encode()
        if libc.mq_open(name, os.O_CREAT | os.O_RDWR, 0o600, attr) < 0:
            err = ctypes.get_errno()
            break
        count += 1
print(count, err, flush=True)
if hold:
    time.sleep(60)
for pid in children:
    os.kill(pid, signal.SIGKILL)
"""
QUOTA_ERRNO = {"inotify": 24, "procs": 11, "mqueue": 24}  # EMFILE, EAGAIN, EMFILE: the quota is used up


def run_quota_hog(kind: str, uid: int, *, hold: bool) -> str:
    """The command that runs `QUOTA_HOG` (given on stdin) for `kind` as `uid` and prints its count and errno;
    with `hold`, detached, keeping what it took (each run writes its own output file)."""
    run = f"python3 /tmp/quota.py {kind} {uid} {'hold' if hold else 'probe'}"
    if not hold:
        return f"cat > /tmp/quota.py; {run}"
    out = f"/tmp/quota-{kind}-{uid}.out"
    return (
        f"cat > /tmp/quota.py; setsid nohup {run} > {out} 2>&1 &"
        f" for i in $(seq 100); do [ -s {out} ] && break; sleep 0.1; done; cat {out}"
    )
