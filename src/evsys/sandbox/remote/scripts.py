"""Shell scripts a remote (cloud) backend runs as root inside its sandboxes, through the service's one
"run this command" call: each command's output goes to files (kept apart and byte-exact, read back bounded and
base64-encoded), its user is dropped with `setpriv` before anything of the command's environment applies (a
PATH or LD_PRELOAD of the trial's never reaches a root process), and its process tree is recorded for a
timeout's kill."""

from __future__ import annotations

import base64
import shlex
from dataclasses import dataclass

from evsys.sandbox.base import (
    AGENT_LOGS_DIR,
    ARTIFACTS_DIR,
    EXTRA_UID_BASE,
    SOLUTION_DIR,
    TESTS_DIR,
    VERIFIER_LOGS_DIR,
)

RUN_DIR = "/run/evsys"  # root-only (0700): pid files, stdin and output of running commands
MACHINERY_FILE = f"{RUN_DIR}/machinery"  # `pid:start-time` of the service's own processes, never killed
MARKER = "@@evsys-result"
EXTRA_UIDS_MARKER = "@@evsys-extra-uids"
EXTRA_UIDS = 31  # extra users' uids (shared slots', as many as on the local backend) checked free at start
NO_USER = "no-user"
AGENT = "agent"
AGENT_UID = 1000

# The agent user, the trial directories, and the service's own processes as they are right after start.
_PREPARE = """set -e
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mkdir -p {dirs} {workdir}
mkdir -p -m 700 {run_dir}
if ! id -u {agent} >/dev/null 2>&1; then
  if command -v useradd >/dev/null 2>&1; then
    useradd -m -s /bin/bash -u {uid} -U {agent} 2>/dev/null || useradd -m -s /bin/bash -U {agent}
  else
    echo '{agent}:x:{uid}:{uid}::/home/{agent}:/bin/bash' >> /etc/passwd
    echo '{agent}:x:{uid}:' >> /etc/group
    mkdir -p /home/{agent} && chown {uid}:{uid} /home/{agent}
  fi
fi
chown {agent}: {agent_dirs}
[ {workdir} = / ] || chown -R {agent}: {workdir}
chmod 1777 /tmp
command -v setpriv >/dev/null || {{ echo 'the image has no setpriv (util-linux)' >&2; exit 1; }}
me=$$; keep=" $me "; p=$me
while [ "$p" -gt 1 ] 2>/dev/null; do
  p=$(cut -d' ' -f4 < /proc/$p/stat 2>/dev/null) || break; keep+="$p "
done
: > {machinery}
for s in /proc/[0-9]*/stat; do
  pid=${{s#/proc/}}; pid=${{pid%/stat}}
  case "$keep" in *" $pid "*) continue;; esac
  rest=$(cat "$s" 2>/dev/null) || continue; rest=${{rest##*) }}; set -- $rest
  echo "$pid:${{20}}" >> {machinery}
done
base=$(( $(id -u {agent}) + 1 ))
for i in $(seq 0 {last_extra}); do
  getent passwd $((base + i)) >/dev/null && {{ base={extra_base}; break; }}
done
echo "{extra_marker} $base"
"""

# One command: $1 the token, $2 the user, $3 the cwd, $4 the output cap, NAME=VALUE pairs, the command.
_EXEC = r"""user_path=$PATH; export PATH=/usr/sbin:/usr/bin:/sbin:/bin
d=/run/evsys/$1 user=$2 cwd=$3 cap=$4; shift 4
cmd=${!#}; set -- "${@:1:$#-1}"
uid=$(id -u -- "$user" 2>/dev/null) || { echo "@@evsys-result no-user"; exit 0; }
gid=$(id -g -- "$user") home=$(getent passwd "$user" | cut -d: -f6)
drop=(); [ "$uid" = 0 ] || drop=("$(command -v setpriv)" --reuid="$uid" --regid="$gid" --init-groups)
in=/dev/null; [ -f "$d.in" ] && in=$d.in
[ -f "$d.cmd" ] && cmd=$(cat "$d.cmd")
mkdir -m 700 "$d" || exit 1
(
  cd -- "$cwd" || exit 1
  echo "$BASHPID" > "$d.pid"
  exec setsid "${drop[@]}" env PATH="$user_path" HOME="${home:-/}" USER="$user" LOGNAME="$user" "$@" \
    /bin/bash -c "$cmd"
) < "$in" > "$d/out" 2> "$d/err" &
wait $!; s=$?
rm -f "$d.pid" "$d.in" "$d.cmd"
echo "@@evsys-result $s $(stat -c %s "$d/out") $(stat -c %s "$d/err")"
for f in out err; do
  n=$(stat -c %s "$d/$f")
  if [ "$n" -le "$cap" ]; then base64 -w0 "$d/$f"; echo; echo
  else head -c $((cap / 2)) "$d/$f" | base64 -w0; echo; tail -c $((cap - cap / 2)) "$d/$f" | base64 -w0; echo
  fi
done
rm -rf "$d"
"""

# Kill the recorded command and its whole tree (its descendants and everything in its session).
_KILL_TREE = r"""export PATH=/usr/sbin:/usr/bin:/sbin:/bin
root=$(cat /run/evsys/$1.pid 2>/dev/null) || exit 0
declare -A kids; all=()
for s in /proc/[0-9]*/stat; do
  read -r line < "$s" 2>/dev/null || continue
  pid=${s#/proc/}; pid=${pid%/stat}; rest=${line##*) }; set -- $rest; kids[$2]+=" $pid"
  [ "$4" = "$root" ] && [ "$pid" != "$root" ] && all+=("$pid")
done
todo=("$root")
while ((${#todo[@]})); do p=${todo[0]}; todo=("${todo[@]:1}"); all+=("$p"); todo+=(${kids[$p]}); done
kill -STOP "${all[@]}" 2>/dev/null; kill -KILL "${all[@]}" 2>/dev/null
exit 0
"""

# Kill every process but the service's own (recorded at start), this script and its ancestors; print how
# many.
_KILL_ALL = r"""export PATH=/usr/sbin:/usr/bin:/sbin:/bin
keep=" 1 $$ "; p=$$
while [ "$p" -gt 1 ] 2>/dev/null; do
  p=$(cut -d' ' -f4 < /proc/$p/stat 2>/dev/null) || break; keep+="$p "
done
machinery=" $(tr '\n' ' ' < /run/evsys/machinery 2>/dev/null) "
victims=()
for s in /proc/[0-9]*/stat; do
  pid=${s#/proc/}; pid=${pid%/stat}
  case "$keep" in *" $pid "*) continue;; esac
  line=$(cat "$s" 2>/dev/null) || continue; rest=${line##*) }; set -- $rest
  case "$machinery" in *" $pid:${20} "*) continue;; esac
  victims+=("$pid")
done
((${#victims[@]})) && { kill -STOP "${victims[@]}"; kill -KILL "${victims[@]}"; } 2>/dev/null
echo ${#victims[@]}
"""


def _bash(script: str, *args: str) -> str:
    """A command line that runs `script` with bash, `args` as its positional parameters."""
    return shlex.join(["/bin/bash", "-c", script, "evsys", *args])


def prepare(workdir: str) -> str:
    """The start-up command: the agent user, the trial directories, the service's processes recorded; it
    prints the first extra user's uid (`extra_uid_base`): the agent's next one when no user of the image has
    it or the EXTRA_UIDS after it (so a service that gives each sandbox a uid range of its own keeps them in
    it), else EXTRA_UID_BASE."""
    q = shlex.quote
    dirs = " ".join(q(d) for d in (AGENT_LOGS_DIR, VERIFIER_LOGS_DIR, ARTIFACTS_DIR, TESTS_DIR, SOLUTION_DIR))
    script = _PREPARE.format(
        dirs=dirs,
        workdir=q(workdir),
        run_dir=RUN_DIR,
        agent=AGENT,
        uid=AGENT_UID,
        agent_dirs=" ".join(q(d) for d in (AGENT_LOGS_DIR, ARTIFACTS_DIR)),
        machinery=MACHINERY_FILE,
        last_extra=EXTRA_UIDS - 1,
        extra_base=EXTRA_UID_BASE,
        extra_marker=EXTRA_UIDS_MARKER,
    )
    return _bash(script)


def extra_uid_base(output: str) -> int:
    """The first extra user's uid `prepare` printed (EXTRA_UID_BASE when it printed none)."""
    _, found, tail = output.rpartition(EXTRA_UIDS_MARKER)
    fields = tail.split()
    return int(fields[0]) if found and fields and fields[0].isdigit() else EXTRA_UID_BASE


def run_command(token: str, command: str, *, user: str, cwd: str, env: dict[str, str], cap: int) -> str:
    """The command line that runs `command` as `user` (stdin from `RUN_DIR/token.in` when uploaded, the
    command itself from `RUN_DIR/token.cmd` when `command` is empty); it prints what `parse_result` reads."""
    pairs = [f"{name}={value}" for name, value in env.items()]
    return _bash(_EXEC, token, user, cwd, str(cap), *pairs, command)


def kill_tree(token: str) -> str:
    """The command line that kills the running command `token` and its whole process tree."""
    return _bash(_KILL_TREE, token)


def kill_all() -> str:
    """The command line that kills every process but the service's own and prints how many it killed."""
    return _bash(_KILL_ALL)


@dataclass(frozen=True)
class CommandOutput:
    """What `run_command` printed: the exit status, and each stream's kept bytes, total and head length."""

    status: int
    stdout: bytes
    stdout_total: int
    stdout_head: int
    stderr: bytes
    stderr_total: int
    stderr_head: int


class UnknownUser(LookupError):
    """The command's user does not exist in the sandbox."""


def parse_result(text: str, cap: int) -> CommandOutput | None:
    """The result `run_command` printed after its marker, or None when it printed none (it was killed)."""
    _, found, tail = text.rpartition(MARKER)
    if not found:
        return None
    lines = tail.split("\n")
    fields = lines[0].split()
    if fields == [NO_USER]:
        raise UnknownUser
    if len(fields) != 3 or len(lines) < 5:
        return None
    status, out_total, err_total = (int(field) for field in fields)
    out = base64.b64decode(lines[1]) + base64.b64decode(lines[2])
    err = base64.b64decode(lines[3]) + base64.b64decode(lines[4])
    head = cap // 2
    return CommandOutput(
        status=status,
        stdout=out,
        stdout_total=out_total,
        stdout_head=head if out_total > cap else len(out),
        stderr=err,
        stderr_total=err_total,
        stderr_head=head if err_total > cap else len(err),
    )
