"""A slot and what runs in it: `Slot`, `slot_exec` (a command as the slot's user), and the root scripts that
prepare a shared slot for its trajectory and clean up after it (`prepare_slot`, `clean_slot`)."""

from __future__ import annotations

import asyncio
import shlex
from dataclasses import dataclass, field

from evsys.records import ExecResult
from evsys.sandbox.base import HELPER_ENV, Sandbox, SandboxError
from evsys.sandbox.pool import Lease

SLOTS_DIR = "/slots"  # root's (0711): the shared slots' workspaces, /slots/<index>
TMP_DIR = (
    f"{SLOTS_DIR}/.tmp"  # root's (0711): each shared slot's own temporary directory, /slots/.tmp/<index>
)
# The sticky directories every user of a sandbox may write to; a slot's files there are deleted when it is
# released or taken (the slot's TMPDIR is its own, but programs that name /tmp or /dev/shm use these).
SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


@dataclass(eq=False)
class Slot:
    """One trajectory's place to run tools: a sandbox, and (when shared) a uid and workspace inside it."""

    slot_id: str
    trajectory_id: str
    lease: Lease = field(repr=False)  # from the pool's `acquire`: the sandbox, or a place in a shared one
    workspace: str
    uid: int | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    given_back: bool = False  # `SlotPool.release` began

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox the slot runs in (shared with other slots when `shared`)."""
        return self.lease.sandbox

    @property
    def index(self) -> int | None:
        """Its place in a shared sandbox; None for a sandbox of its own."""
        return self.lease.place

    @property
    def shared(self) -> bool:
        """True when the slot shares its sandbox with other slots."""
        return self.uid is not None

    @property
    def tmp(self) -> str:
        """The slot's own temporary directory (its TMPDIR); an own sandbox's is its /tmp."""
        return f"{TMP_DIR}/{self.index}" if self.shared else "/tmp"


def _as_uid(uid: int, command: str) -> str:
    """`command` run by bash as `uid` (and its gid): no supplementary groups, no capabilities, and no gaining
    any through a setuid or file-capability program (no_new_privs)."""
    drop = f"setpriv --reuid={uid} --regid={uid} --clear-groups --inh-caps=-all --no-new-privs"
    return f"{drop} bash -c {shlex.quote(command)}"


async def slot_exec(
    slot: Slot,
    command: str,
    *,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 - the command's own limit
    stdin: bytes | None = None,
) -> ExecResult:
    """Run `command` as the slot's user: in a shared sandbox root drops to the slot's uid (`_as_uid`) in a
    session of its own, with umask 077, HOME at the slot's workspace and TMPDIR at its own temporary
    directory; in an own sandbox as its agent."""
    if not slot.shared:
        return await slot.sandbox.exec(
            command, cwd=cwd or slot.workspace, env=env, timeout=timeout, stdin=stdin
        )
    assert slot.uid is not None
    own = {"HOME": slot.workspace, "USER": f"slot{slot.index}", "TMPDIR": slot.tmp}
    env = {**(env or {}), **own}
    inner = f"umask 077\n{command}"
    wrapped = f"exec setsid --wait {_as_uid(slot.uid, inner)}"
    return await slot.sandbox.exec(
        wrapped, cwd=cwd or slot.workspace, user="root", env=env, timeout=timeout, stdin=stdin
    )


# Root, for a shared slot: $1 its uid, $2 its workspace, $3 its temporary directory, $4 `kill` (its processes
# only) or `clean` (everything of it, its workspace and temporary directory made empty), then SHARED_DIRS.
# Every process of the uid is killed by the uid itself: one kill(-1) reaches all of them at once (a process
# forking in a loop included: a child is either listed by that call or never made), and waited for (a write
# under way when the signal came ends before anything is deleted). Its SysV IPC objects are
# removed as the uid too (root here may lack CAP_IPC_OWNER), its files in the shared sticky directories by
# root. Processes are counted from /proc (`alive`), so images without procps clean slots too.
_CLEAN = r"""export PATH=/usr/sbin:/usr/bin:/sbin:/bin
u=$1 ws=$2 tmp=$3 mode=$4; shift 4
alive() {{ cat /proc/[0-9]*/status 2>/dev/null |
  awk -v u="$u" '/^State:/ {{s = $2}} /^Uid:/ && $2 == u && s != "Z" {{n++}} END {{print n + 0}}'; }}
n=$(alive)
{kill}
for _ in $(seq 500); do [ "$(alive)" = 0 ] && break; sleep 0.01; done  # until they are gone
[ "$mode" = kill ] && {{ echo "${{n:-0}}"; exit 0; }}
for f in shm msg sem; do
  [ -r /proc/sysvipc/$f ] || continue
  case $f in shm) o=m c1=8 c2=10;; msg) o=q c1=8 c2=10;; sem) o=s c1=5 c2=7;; esac
  ids=$(awk -v u="$u" -v a="$c1" -v b="$c2" 'NR > 1 && ($a == u || $b == u) {{print $2}}' /proc/sysvipc/$f)
  for id in $ids; do
    {ipcrm}
  done
done
for d in "$@"; do
  [ -d "$d" ] && find "$d" -xdev -mindepth 1 -uid "$u" -prune -exec rm -rf -- {{}} + 2>/dev/null
done
mkdir -p -m 711 {slots} {tmp_root} && chmod 711 {slots} {tmp_root} || exit 1
rm -rf -- "$ws" "$tmp" && mkdir -m 700 -- "$ws" "$tmp" && chown "$u:$u" -- "$ws" "$tmp" || exit 1
echo "${{n:-0}}"
"""


def _clean_script() -> str:
    kill = _as_uid_line("kill -KILL -1 2>/dev/null; true")
    ipcrm = _as_uid_line('ipcrm -$0 "$1"', '"$o" "$id"')
    return _CLEAN.format(kill=kill, ipcrm=ipcrm, slots=SLOTS_DIR, tmp_root=TMP_DIR)


def _as_uid_line(command: str, args: str = "") -> str:
    """A line of `_CLEAN` running `command` as the uid in $u (positional `args` after it)."""
    drop = 'setpriv --reuid="$u" --regid="$u" --clear-groups --inh-caps=-all --no-new-privs'
    return f"{drop} bash -c {shlex.quote(command)} {args}".rstrip()


CLEAN_SCRIPT = _clean_script()


async def clean_slot(slot: Slot, *, processes_only: bool = False) -> int:
    """Kill every process of the shared slot's uid, and unless `processes_only` remove its IPC objects and
    its files in the shared directories and make its workspace and temporary directory empty; how many
    processes it had. `SandboxError` when that fails (the sandbox should not be used again)."""
    assert slot.uid is not None
    mode = "kill" if processes_only else "clean"
    argv = ["bash", "-c", CLEAN_SCRIPT, "slot", str(slot.uid), slot.workspace, slot.tmp, mode]
    result = await slot.sandbox.exec(shlex.join([*argv, *SHARED_DIRS]), cwd="/", user="root", env=HELPER_ENV)
    if not result.ok:
        raise SandboxError(
            f"slot {slot.slot_id}: cleaning up after it failed: {result.stderr.strip()[-500:]}"
        )
    return int((result.stdout.split() or ["0"])[-1])
