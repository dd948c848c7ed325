"""The image's ENTRYPOINT, run at sandbox start the way Harbor's Docker environment runs it.

Harbor keeps an image's ENTRYPOINT and replaces its CMD with a keep-alive (`sh -c "sleep infinity"`), so an
entrypoint script that starts a service or edits `/etc/hosts` and then does `exec "$@"` has done its work by
the time it becomes the keep-alive. A backend whose sandbox does not start from the image's process (the local
one: its pid 1 is evsys's exec daemon) calls `run_entrypoint` right after start (and after a reset, which
kills every process): the entrypoint starts detached, as root, in the workdir, with the keep-alive as
its arguments; the call returns once the entrypoint has handed over to the keep-alive, or has exited, or after
`wait_sec` for one that keeps running in the foreground (a server started as the entrypoint itself). Its
output goes to `ENTRYPOINT_LOG` in the sandbox.

Services an entrypoint starts in the background are often not up when it hands over (a DNS server still
binding its port 60 ms later, when the agent starts). So after a hand-over (or a clean exit) the call waits
for the sandbox to settle: its listening TCP and bound UDP sockets unchanged and every other process asleep,
for `SETTLE_QUIET_SEC` in a row, at most `SETTLE_MAX_SEC`. How long that took is appended to `ENTRYPOINT_LOG`
(`evsys: settled after N polls`) and counts in the trial's `sandbox_start` time.
"""

from __future__ import annotations

import secrets
import shlex

from evsys.sandbox.base import Sandbox, SandboxError

ENTRYPOINT_LOG = "/run/evsys-entrypoint.log"
WAIT_SEC = 30.0
POLL_SEC = 0.05
SETTLE_QUIET_SEC = 0.3
SETTLE_MAX_SEC = 5.0

# POSIX sh (dash, busybox, bash): what is listening (TCP state 0A, UDP 07), and whether any process but this
# shell is running or in uninterruptible sleep (a service still starting up).
_SETTLE_FUNCTIONS = r"""
listening() {
  for f in /proc/net/tcp /proc/net/tcp6 /proc/net/udp /proc/net/udp6; do
    [ -r "$f" ] || continue
    while read -r _ addr _ st _; do
      case "$f:$st" in */tcp*:0A|*/udp*:07) printf '%s ' "$addr";; esac
    done < "$f"
  done
}
busy() {
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = "$$" ] && continue
    line=""; read -r line < "$p/stat" 2>/dev/null || continue
    state=${line##*) }; state=${state%% *}
    case "$state" in R|D) return 0;; esac
  done
  return 1
}
settle() {
  prev=$(listening); quiet=0; n=0
  while [ "$n" -lt "$1" ] && [ "$quiet" -lt "$2" ]; do
    sleep "$3"; n=$((n + 1)); now=$(listening)
    if [ "$now" = "$prev" ] && ! busy; then quiet=$((quiet + 1)); else quiet=0; prev=$now; fi
  done
  echo "evsys: settled after $n polls" >> "$4"
}
"""


class EntrypointFailed(SandboxError):
    """The image's ENTRYPOINT exited with an error before handing over to the keep-alive."""


def settle_script() -> str:
    """The shell script that waits for the sandbox to settle (see the module docstring): for a backend whose
    container ran the ENTRYPOINT itself (docker), run once the keep-alive is found."""
    return _SETTLE_FUNCTIONS + _settle_call() + "\n"


def _settle_call() -> str:
    polls = max(1, int(SETTLE_MAX_SEC / POLL_SEC))
    return f"settle {polls} {max(1, round(SETTLE_QUIET_SEC / POLL_SEC))} {POLL_SEC} {ENTRYPOINT_LOG}"


def entrypoint_script(entrypoint: list[str], ready_file: str, wait_sec: float) -> str:
    """The shell script that starts `entrypoint` detached and waits for its hand-over (exit 0), its exit
    (exit with its status, 0 counted as done) or the deadline (exit 0: it runs in the foreground)."""
    keep_alive = ["/bin/sh", "-c", f": > {shlex.quote(ready_file)}; exec sleep infinity"]
    argv = shlex.join([*entrypoint, *keep_alive])
    status = f"{ready_file}.status"
    rounds = max(1, int(wait_sec / POLL_SEC))
    settle = _settle_call()
    code = f'"$(cat {shlex.quote(status)})"'
    return (
        _SETTLE_FUNCTIONS + f"( {argv} > {ENTRYPOINT_LOG} 2>&1 < /dev/null; echo $? > {shlex.quote(status)} )"
        " > /dev/null 2>&1 < /dev/null &\n"
        f"for _ in $(seq {rounds}); do\n"
        f"  [ -e {shlex.quote(ready_file)} ] && {{ {settle}; exit 0; }}\n"
        f"  [ -e {shlex.quote(status)} ] && {{ [ {code} = 0 ] && {settle}; exit {code}; }}\n"
        f"  sleep {POLL_SEC}\n"
        "done\n"
        "exit 0\n"
    )


async def run_entrypoint(sandbox: Sandbox, entrypoint: list[str], *, wait_sec: float = WAIT_SEC) -> None:
    """Start `entrypoint` in `sandbox` (see the module docstring); EntrypointFailed when it exits non-zero
    before the hand-over, with the tail of its output."""
    if not entrypoint:
        return
    ready = f"/run/.evsys-entrypoint-{secrets.token_hex(6)}"
    script = entrypoint_script(entrypoint, ready, wait_sec)
    result = await sandbox.exec(script, user="root", timeout=wait_sec + SETTLE_MAX_SEC + 30)
    if result.exit_code != 0:
        log = await sandbox.exec(f"tail -c 2000 {ENTRYPOINT_LOG}", user="root", timeout=30)
        raise EntrypointFailed(
            f"sandbox {sandbox.spec.name}: the image's ENTRYPOINT {shlex.join(entrypoint)} exited with "
            f"status {result.exit_code}: {log.stdout.strip()[-1000:]}"
        )
