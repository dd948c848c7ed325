"""Persistent bash workers for the exec daemon (stdlib only; runs inside the sandbox next to daemon.py).

Forking and exec'ing a fresh bash costs about a millisecond of CPU, so the daemon keeps idle bash processes
per user. Each runs one command at a time, and forks the subshell for its next command *before* that command
arrives (so the fork is off the latency path): the subshell, in its own process group (monitor mode), is
reported as `R <pid>` and blocks reading a job name from the worker's stdin. The daemon writes the command's
script (environment, cwd, the command) to a file in a root-only directory, creates two FIFOs for stdout/stderr
there, and sends the job name; the subshell redirects to the FIFOs and sources the script. When it ends the
worker reports `E <status>` and forks the next one. An agent may write to its own workers' pipes, which only
affects its own commands; the daemon checks a pid's parent before killing its group. A dead worker (e.g.
killed by the agent) finishes its command as killed (137) and is not reused."""

from __future__ import annotations

import _signal as signal  # the C module: `signal` would import enum, slowing startup
import posix as os  # the C module: `os` loads posixpath, stat, _collections_abc (~1.3 ms per start)

from daemon_os import exec_child, killpg

TYPE_CHECKING = False  # not `from typing import ...`: importing typing costs ~10 ms of sandbox start
if TYPE_CHECKING:
    from daemon import Command

JOB_DIR = "/.evsys/jobs"
S_IFMT, S_IFIFO = 0o170000, 0o010000  # not `import stat`: startup cost
MAX_WORKERS_PER_USER = 64
WORKER_SCRIPT = f"""set -m
__evsys_last=
while :; do
  ( set +m
    read -r __evsys_job || kill -KILL $$
    case $__evsys_job in *[!0-9a-f-]* | "") exit 0 ;; esac
    echo "J $__evsys_job"
    exec >"{JOB_DIR}/$__evsys_job.o" 2>"{JOB_DIR}/$__evsys_job.e" </dev/null
    . "{JOB_DIR}/$__evsys_job.sh" ) &
  [ "$!" = "$__evsys_last" ] && exit 1
  __evsys_last=$!
  echo "R $!"
  wait $!
  echo "E $! $?"
done
"""


def prepare_job_dir() -> None:
    """Create the root-owned, traversable but unlistable job directory (job names are unguessable)."""
    try:
        os.mkdir(JOB_DIR, 0o711)
    except FileExistsError:
        pass
    os.chown(JOB_DIR, 0, 0)
    os.chmod(JOB_DIR, 0o711)


def quote(value: str) -> str:
    """Single-quote a string for bash (the same rule as shlex.quote, without importing re at startup)."""
    return "'" + value.replace("'", "'\"'\"'") + "'"


def job_script(req: dict) -> str:
    """The bash text a worker's subshell sources: exported environment, cwd, then the command via eval."""
    env = req.get("env") or {}
    parts = []
    if env:
        parts.append("export " + " ".join(f"{k}={quote(v)}" for k, v in env.items() if k.isidentifier()))
    cwd = quote(req.get("cwd") or "/")
    msg = quote(f"evsys: cannot enter working directory {req.get('cwd')!r}")
    parts.append(f"cd -- {cwd} 2>/dev/null || {{ printf '%s\\n' {msg} >&2; exit 126; }}")
    parts.append(f"__evsys_cmd={quote(req['cmd'])}")
    parts.append('eval "$__evsys_cmd"')
    return "\n".join(parts) + "\n"


class Job:
    """The files of one command run by a worker: script, stdout/stderr FIFOs, and our ends of them."""

    def __init__(self, rid: int, req: dict, uid: int) -> None:
        self.name = f"{rid}-{os.urandom(8).hex()}"
        base = f"{JOB_DIR}/{self.name}"
        self.paths = [base + ".sh", base + ".o", base + ".e"]
        self.read_fds: list[int] = []
        self.hold_fds: list[int] = []
        try:
            self._create(req, uid)
        except BaseException:
            for fd in self.read_fds:
                os.close(fd)
            self.cleanup()
            raise

    def _create(self, req: dict, uid: int) -> None:
        mode = 0o600 if uid == 0 else 0o644
        fd = os.open(self.paths[0], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        try:
            os.write(fd, job_script(req).encode("utf-8", "surrogateescape"))
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        for path in self.paths[1:]:
            os.mkfifo(path, 0o600)
            if uid != 0:
                os.chown(path, uid, uid)
            r = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
            if os.fstat(r).st_mode & S_IFMT != S_IFIFO:
                os.close(r)
                raise OSError(f"job file {path} is not a FIFO")
            self.read_fds.append(r)
            # hold a write end so the read end never reports EOF before the command opens it
            self.hold_fds.append(os.open(f"/proc/self/fd/{r}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC))

    def cleanup(self) -> None:
        """Close our FIFO ends and remove the job's files."""
        for fd in self.hold_fds:
            os.close(fd)
        self.hold_fds = []
        for path in self.paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


class Worker:
    """One persistent bash process of one user; `current` is the command it is running, if any."""

    def __init__(self, pid: int, user: str, cmd_fd: int, status_fd: int) -> None:
        self.pid = pid
        self.user = user
        self.cmd_fd = cmd_fd
        self.status_fd = status_fd
        self.buf = bytearray()
        self.current = None
        self.ready_pid = 0

    def submit(self, cmd) -> None:
        """Hand a command (with its job) to this idle worker's waiting subshell."""
        self.current = cmd
        cmd.pid = self.ready_pid
        os.write(self.cmd_fd, cmd.job.name.encode() + b"\n")

    def lines(self, data: bytes) -> list[list[str]]:
        """Split status output into `R pid`, `J job`, `E pid status` lines; malformed lines are dropped."""
        self.buf += data
        out = []
        while b"\n" in self.buf:
            line, _, rest = self.buf.partition(b"\n")
            self.buf = bytearray(rest)
            parts = line.decode("ascii", "replace").split()
            size = {"R": 2, "J": 2, "E": 3}.get(parts[0] if parts else "")
            if size == len(parts) and (parts[0] == "J" or all(p.isdigit() for p in parts[1:])):
                out.append(parts)
        return out

    def owns(self, pid: int, parents: tuple[int, ...] = ()) -> bool:
        """True when `pid` is a child of this worker (or of one of `parents`), so its group is the job's."""
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            return False
        return int(stat[stat.rfind(b")") + 2 :].split()[1]) in (self.pid, *parents)

    def close(self) -> None:
        """Close our pipe ends (the worker exits on EOF)."""
        for fd in (self.cmd_fd, self.status_fd):
            try:
                os.close(fd)
            except OSError:
                pass


class WorkerPoolMixin:
    """The daemon's worker-pool half: spawning, feeding and retiring workers (mixed into `daemon.Daemon`)."""

    def acquire(self, user: str) -> Worker | None:
        """An idle worker of `user`, spawning one if the pool has room."""
        if self.idle[user]:
            return self.idle[user].pop()
        if sum(1 for w in self.workers.values() if w.user == user) >= MAX_WORKERS_PER_USER:
            return None
        cmd_r, cmd_w = os.pipe2(os.O_CLOEXEC)
        status_r, status_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            argv = ["bash", "--norc", "--noprofile", "-c", WORKER_SCRIPT]
            exec_child({"user": user, "cwd": "/", "env": {}}, cmd_r, status_w, self.devnull, argv)
        os.close(cmd_r)
        os.close(status_w)
        worker = Worker(pid, user, cmd_w, status_r)
        self.workers[pid] = worker
        os.set_blocking(status_r, False)
        self.watch(status_r, ("worker", worker))
        return worker

    def worker_output(self, worker: Worker) -> None:
        """Status lines from a worker: `R pid` (next subshell ready), `E status`. EOF: the worker died."""
        try:
            data = os.read(worker.status_fd, 4096)
        except BlockingIOError:
            return
        if not data:
            self.retire(worker)
            return
        for parts in worker.lines(data):
            cmd = worker.current
            if parts[0] == "R":
                worker.ready_pid = int(parts[1])
                if cmd is not None and not cmd.pid:
                    cmd.pid = worker.ready_pid
                    if cmd.timed_out:
                        self.kill_job(cmd)
            elif parts[0] == "J":
                if cmd is not None and cmd.job is not None and parts[1] == cmd.job.name:
                    cmd.started = True
            elif cmd is None or int(parts[1]) != cmd.pid:
                worker.ready_pid = 0  # an idle subshell ended (e.g. killed); the next `R` replaces it
            elif not cmd.started:
                self.redispatch(worker, cmd)  # its subshell died before taking the job
                return
            else:
                worker.current, worker.ready_pid = None, 0
                self.idle[worker.user].append(worker)
                self.finish(cmd, int(parts[2]))

    def redispatch(self, worker: Worker, cmd: Command) -> None:
        """The job line is stuck in a worker whose subshell died: drop that worker, run the command afresh."""
        worker.current = None
        try:
            os.kill(worker.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.retire(worker)
        for fd in cmd.fds:
            self.unwatch(fd)
            os.close(fd)
        cmd.job.cleanup()
        del self.commands[cmd.rid]
        self.start_forked(cmd.req, b"")

    def kill_job(self, cmd: Command, orphaned: bool = False) -> None:
        """SIGKILL a command's process group (for worker jobs: only if it really is the worker's subshell;
        `orphaned`: the worker died, so the subshell is now our child)."""
        if cmd.pid and (cmd.worker is None or cmd.worker.owns(cmd.pid, (os.getpid(),) if orphaned else ())):
            killpg(cmd.pid)

    def retire(self, worker: Worker) -> None:
        """Forget a dead worker; its command (if any) ends as killed."""
        self.unwatch(worker.status_fd)
        worker.close()
        self.workers.pop(worker.pid, None)
        if worker in self.idle[worker.user]:
            self.idle[worker.user].remove(worker)
        cmd = worker.current
        if cmd is not None and self.commands.get(cmd.rid) is cmd:
            self.kill_job(cmd, orphaned=True)
            self.finish(cmd, 137)
