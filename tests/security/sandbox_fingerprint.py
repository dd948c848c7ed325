"""A sandbox's fingerprint: everything a trial could leave behind for the next one, as text per part, so
a reset sandbox (a reused slot) can be compared with a fresh one. `PARTS` says what each part holds.

It runs `python3` as root inside the sandbox (its commands, through the daemon, like a trial's), one command
as the agent, and reads what cannot be seen from inside on the host (pid 1's environment, the cgroup's
limits). What differs between two fresh sandboxes of one spec is normalised away: the sandbox's agent uid
(each sandbox has its own) reads `AGENT`, pids, mount ids and device numbers are dropped, times are never
read, and the overlay's host-side layer options read `HOST` (a fresh sandbox's `lowerdir=<host path>` and a
reset one's `lowerdir+=<fd>` per layer name the same layers).
"""

from __future__ import annotations

import difflib
import re
import shlex
from pathlib import Path

from evsys.sandbox import LocalSandbox

PARTS = {
    "pid1": "pid 1's rlimits (/proc/1/limits), nice, scheduling policy, cpu affinity, io priority, "
    "oom_score_adj, oom_adj, coredump_filter, autogroup nice",
    "inherited": "what a root command inherits: its rlimits, umask, nice, oom_score_adj and environment",
    "agent": "what an agent command sees: `id`, umask, `ulimit -a`",
    "pid1_environment": "pid 1's environment (read on the host: /proc/1/environ is not readable inside)",
    "files": "every file on the writable mounts (/, /tmp, /dev, /dev/shm, /dev/pts, the daemon's job dir; "
    "so /etc, /root, /home, /var/tmp, /run...): type, mode, owner, size, link target, sha256 of the "
    "content up to 1 MiB (at most MAX_FILES entries)",
    "ipc": "SysV IPC objects (/proc/sysvipc/*) and the POSIX message queues of MQ_NAMES (no /dev/mqueue "
    "is mounted inside, so named queues are probed)",
    "processes": "every process but the fingerprint's own session: uid and command line",
    "mounts": "/proc/self/mountinfo: mount point, parent's mount point, root, options, type, source",
    "users": "/etc/passwd and /etc/group",
    "names": "hostname and NIS domain name",
    "network": "interfaces and the number of TCP/UDP/UNIX/raw sockets in the network namespace",
    "cgroup": "/proc/self/cgroup inside; the memory and pids limits of the sandbox's cgroups (on the host)",
}
MAX_FILES = 100_000
MQ_NAMES = ("/evsys-fp", "/evsys-fp-agent")
WRITABLE_ROOTS = ("/", "/tmp", "/dev", "/dev/shm", "/dev/pts", "/.evsys/jobs")
CGROUP_LIMITS = ("memory.max", "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.swap.max")
CGROUP_LIMITS += ("pids.max",)

# Runs as root inside the sandbox: prints one "### part" header per part, its text after it.
_INSIDE = r"""
import ctypes, hashlib, os, re, resource, stat, subprocess, sys
AGENT, MQ, ROOTS, MAX = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), int(sys.argv[4])
def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        return "<%s>" % e.strerror
def part(name, text):
    print("### " + name)
    print(re.sub(r"\b%s\b" % AGENT, "AGENT", text.rstrip("\n")))
def run(*argv):
    done = subprocess.run(argv, capture_output=True, text=True)
    return done.stdout + done.stderr
def limits():
    return "\n".join("%s %s" % (n, resource.getrlimit(getattr(resource, n)))
                     for n in sorted(dir(resource)) if n.startswith("RLIMIT_"))
stat1 = read("/proc/1/stat").rsplit(")", 1)[-1].split()
pid1 = [read("/proc/1/limits"), "nice %s policy %s rt_priority %s" % (stat1[16], stat1[38], stat1[37]),
        "affinity %s" % sorted(os.sched_getaffinity(1)), run("ionice", "-p", "1")]
pid1 += ["%s %s" % (n, read("/proc/1/" + n).strip()) for n in ("oom_score_adj", "oom_adj", "coredump_filter")]
pid1.append(re.sub(r"^/autogroup-\d+ ", "autogroup ", read("/proc/1/autogroup")))
part("pid1", "\n".join(pid1))
mask = os.umask(0); os.umask(mask)
# OLDPWD: a command the daemon runs in a pre-forked worker (its third and later) has it, a first one not
env = sorted("%s=%s" % kv for kv in os.environ.items() if kv[0] not in ("_", "SHLVL", "OLDPWD"))
part("inherited", "\n".join([limits(), "umask %o nice %d" % (mask, os.getpriority(0, 0)),
     "oom_score_adj " + read("/proc/self/oom_score_adj").strip()] + env))
def entry(path):
    st = os.lstat(path)
    line = "%s %s %d:%d" % (path, stat.filemode(st.st_mode), st.st_uid, st.st_gid)
    if stat.S_ISLNK(st.st_mode):
        return line + " -> " + os.readlink(path)
    if stat.S_ISREG(st.st_mode):
        line += " %d" % st.st_size
        if st.st_size <= 1 << 20:
            with open(path, "rb") as f:
                data = re.sub(rb"\b%s\b" % AGENT.encode(), b"AGENT", f.read())
            line += " " + hashlib.sha256(data).hexdigest()[:16]
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        line += " dev %d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))
    return line
files = []
for top in ROOTS:
    dev, files = os.lstat(top).st_dev, files + [entry(top)]
    for here, dirs, names in os.walk(top):
        files += [entry(os.path.join(here, n)) for n in sorted(dirs + names)][: max(MAX - len(files), 0)]
        dirs[:] = sorted(d for d in dirs if os.lstat(os.path.join(here, d)).st_dev == dev)
part("files", "\n".join(files + (["<truncated at %d>" % MAX] if len(files) >= MAX else [])))
rt = ctypes.CDLL("librt.so.1", use_errno=True)
mqs = [q + (" present" if rt.mq_open(q.encode(), os.O_RDONLY, 0, None) >= 0 else " absent") for q in MQ]
part("ipc", "\n".join([read("/proc/sysvipc/" + n) for n in ("shm", "msg", "sem")] + mqs))
me, procs = os.getsid(0), []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        if os.getsid(int(pid)) == me:
            continue
        uid = re.search(r"Uid:\s+(\d+)", read("/proc/%s/status" % pid)).group(1)
        procs.append("%s %s" % (uid, read("/proc/%s/cmdline" % pid).replace("\0", " ").strip()))
    except (OSError, AttributeError):
        continue
part("processes", "\n".join(sorted(procs)))
rows = [line.split() for line in read("/proc/self/mountinfo").splitlines()]
points = {r[0]: r[4] for r in rows}
def mount(r):
    sep = r.index("-")
    sup = re.sub(r"(lowerdir|upperdir|workdir)\+?=[^,]*", r"\1=HOST", r[sep + 3])
    sup = re.sub(r"lowerdir=HOST(,lowerdir=HOST)+", "lowerdir=HOST", sup)
    return " ".join([r[4], "in", points.get(r[1], "?"), r[3], r[5], r[sep + 1], r[sep + 2], sup])
part("mounts", "\n".join(sorted(mount(r) for r in rows)))
part("users", read("/etc/passwd") + read("/etc/group"))
part("names", os.uname().nodename + " " + read("/proc/sys/kernel/domainname"))
net = [line.split(":")[0].strip() for line in read("/proc/net/dev").splitlines()[2:]]
for table in ("tcp", "tcp6", "udp", "udp6", "unix", "raw"):
    net.append("%s %d" % (table, len(read("/proc/net/" + table).splitlines()) - 1))
part("network", "\n".join(sorted(net)))
part("cgroup", read("/proc/self/cgroup"))
"""
_AGENT = "id; umask; ulimit -a"


async def fingerprint(sb: LocalSandbox) -> dict[str, str]:
    """The fingerprint of running `sb` (part -> text, the parts of PARTS)."""
    agent = str(sb.agent_uid)
    args = [agent, ",".join(MQ_NAMES), ",".join(WRITABLE_ROOTS), str(MAX_FILES)]
    inside = await sb.exec(f"python3 -c {shlex.quote(_INSIDE)} {shlex.join(args)}", user="root", timeout=60)
    assert inside.exit_code == 0, inside.stderr
    parts: dict[str, str] = {}
    for chunk in inside.stdout.split("### ")[1:]:
        name, _, text = chunk.partition("\n")
        parts[name] = text
    as_agent = await sb.exec(_AGENT, user="agent")
    parts["agent"] = re.sub(rf"\b{agent}\b", "AGENT", as_agent.stdout + as_agent.stderr)
    parts["pid1_environment"] = _host_environment(sb)
    parts["cgroup"] += _host_cgroup_limits(sb)
    assert set(parts) == set(PARTS), set(parts) ^ set(PARTS)
    return parts


def differences(before: dict[str, str], after: dict[str, str]) -> dict[str, str]:
    """The parts that differ (part -> a unified diff of its lines); empty when the fingerprints are equal."""
    found = {}
    for name in PARTS:
        if before.get(name) != after.get(name):
            lines = difflib.unified_diff(
                before.get(name, "").splitlines(), after.get(name, "").splitlines(), lineterm="", n=0
            )
            found[name] = "\n".join(list(lines)[2:42])
    return found


def _host_environment(sb: LocalSandbox) -> str:
    data = Path(f"/proc/{sb._daemon_pid()}/environ").read_bytes()
    return "\n".join(sorted(data.decode(errors="replace").split("\0")))


def _host_cgroup_limits(sb: LocalSandbox) -> str:
    assert sb._cgroup is not None
    found = []
    for controller, directory in sorted(sb._cgroup.dirs.items()):
        for name in CGROUP_LIMITS:
            path = Path(directory) / name
            if path.exists():
                found.append(f"{controller} {name} {path.read_text().strip()}")
    return "\n" + "\n".join(found)


_MQ_CREATE = (
    "python3 -c \"import ctypes, os; rt = ctypes.CDLL('librt.so.1'); "
    "print('posix mq:', rt.mq_open(b'{}', os.O_CREAT | os.O_RDWR, 0o600, None))\""
)
_UDP_HOLDER = (
    'python3 -c "import socket, time; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); '
    "s.bind(('127.0.0.1', 9999)); time.sleep(1000)\" </dev/null >/dev/null 2>&1 &"
)
# prlimit64 on pid 1 named with high bits set (the kernel reads a pid as 32 bits)
_PRLIMIT_HIGH_PID = (
    'python3 -c "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); '
    "nr = {'x86_64': 302, 'aarch64': 261}[os.uname().machine]; new = (ctypes.c_uint64 * 2)(4096, 4096); "
    "print('prlimit64 pid 1 + 2**32:', libc.syscall(nr, ctypes.c_ulong(2**32 + 1), 1, new, None))\""
)
# A hostile trial's root: it tries to change every part (each attempt's exit status is printed: `name: N`).
# Refused today: pid 1's limits, nice, policy, affinity and io priority; the hostname; mounts.
HOSTILE_ROOT = (
    r"""
sleep 1000 </dev/null >/dev/null 2>&1 & prlimit --pid $! --fsize=4096:4096; echo "prlimit another: $?"
prlimit --pid 1 --fsize=4096:4096 --nofile=64:64; echo "prlimit pid 1: $?"
renice -n 19 -p 1; echo "renice pid 1: $?"; chrt --idle -p 0 1; echo "chrt pid 1: $?"
taskset -p 1 1; echo "taskset pid 1: $?"; ionice -c 3 -p 1; echo "ionice pid 1: $?"
echo 1000 > /proc/1/oom_score_adj; echo "oom_score_adj pid 1: $?"
echo 0x7f > /proc/1/coredump_filter; echo "coredump_filter pid 1: $?"
echo 19 > /proc/1/autogroup; echo "autogroup pid 1: $?"
hostname evil; echo "hostname: $?"; mount -t tmpfs x /mnt; echo "mount: $?"
for d in / /tmp /dev /dev/shm /dev/pts /var/tmp /run /home /root /etc /app /opt /var /logs /.evsys/jobs; do
  echo left > $d/.left; mkdir -p $d/.leftdir
done
chmod 777 /var/tmp /root /etc; chmod 600 /dev/pts/ptmx; chmod 700 /dev/shm; chown 4242 /tmp
useradd -m evil; groupadd evilgroup; echo 'evil2:x:0:0::/root:/bin/bash' >> /etc/passwd
echo 'export EVIL=1' >> /etc/profile; echo EVIL=1 >> /etc/environment; echo 'umask 000' >> /root/.bashrc
mkfifo /tmp/fifo; ln -s /etc/shadow /tmp/link
ipcmk -M 4096 && ipcmk -Q && ipcmk -S 2; echo "sysv ipc: $?"
setsid sleep 1001 </dev/null >/dev/null 2>&1 & nohup sleep 1002 </dev/null >/dev/null 2>&1 &
"""
    + _PRLIMIT_HIGH_PID
    + "\n"
    + _MQ_CREATE.format("/evsys-fp")
    + "\n"
    + _UDP_HOLDER
    + "\nexit 0\n"
)
# ... and its agent
HOSTILE_AGENT = (
    r"""
for d in /tmp /dev/shm /var/tmp /home/agent /app; do echo mine > $d/.mine; done
ipcmk -M 4096 >/dev/null; (sleep 1003 </dev/null >/dev/null 2>&1 &)
"""
    + _MQ_CREATE.format("/evsys-fp-agent")
    + "\n"
)
# the parts HOSTILE_ROOT / HOSTILE_AGENT do change in a running sandbox (the others they only try to)
CHANGED_BY_HOSTILE = {"pid1", "files", "ipc", "processes", "users", "network"}
