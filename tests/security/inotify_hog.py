"""A program that takes every inotify instance its uid may hold, for the per-uid kernel quota tests.

`run_hog(uid)` is the shell command that starts it detached (as the exec's user, or after switching to `uid`
when started as root) and prints how many instances it took and the errno that stopped it — or
`setuid-failed ERRNO` when the switch was refused. `ONE_INOTIFY` prints one more `inotify_init()`'s result.
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
