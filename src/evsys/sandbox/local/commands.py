"""Commands in a `LocalSandbox`: `exec`, `exec_program`, `spawn`, `shell` and `kill_processes`, each one
request to the in-sandbox daemon (docs/sandbox.md). The environment a command gets: evsys's base PATH and
variables, then the image's Env (its PATH the base of `${PATH}` in the spec's), then the spec's, then the
call's."""

from __future__ import annotations

import time

from evsys.records import ExecResult, LimitKind
from evsys.sandbox.base import SandboxError
from evsys.sandbox.local import pylayer, rootfs
from evsys.sandbox.local.bwrap import tmp_size_mb
from evsys.sandbox.local.client import Header
from evsys.sandbox.local.core import LocalSandboxCore
from evsys.sandbox.local.exhaustion import exhaustion_evidence
from evsys.sandbox.local.process import SandboxProcess
from evsys.sandbox.shell import ExecShellSession

STORAGE_FULL_BYTES = 1 << 20
USERS = ("agent", "root")
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def expand_path(value: str, path: str) -> str:
    """`value` with `${PATH}` and `$PATH` replaced by `path`."""
    return value.replace("${PATH}", path).replace("$PATH", path)


class LocalCommandsMixin(LocalSandboxCore):
    """The command half of `LocalSandbox` (uses its `_running_client()`, `spec`, `_cgroup` and `_shells`)."""

    def _env(self, user: str, extra: dict[str, str] | None) -> dict[str, str]:
        home = "/root" if user == "root" else rootfs.AGENT_HOME
        env = {"PATH": BASE_PATH, "HOME": home, "USER": user, "LOGNAME": user, "SHELL": "/bin/bash"}
        env |= {"LANG": "C.UTF-8", "TERM": "dumb", "HOSTNAME": "evsys"}
        if self.spec.image is not None:  # the image's Env, its PATH the base of `${PATH}` in the spec's
            env |= self.spec.image.config.env
            env |= {k: expand_path(v, env["PATH"]) for k, v in self.spec.env.items()}
        else:
            env |= pylayer.ENV if self.spec.host_python else {}
            env |= self.spec.env
        if extra:
            env |= extra
        return env

    async def exec(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the Sandbox protocol's per-command limit
        user: str | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run `/bin/bash -c command` inside the sandbox through the daemon; output before a timeout is kept.
        Each stream keeps its first and last `spec.max_output_bytes / 2` bytes, bounded as it streams."""
        return await self._exec_request(command, cwd, env, timeout, user, stdin, {})

    async def _exec_request(
        self,
        command: str,
        cwd: str | None,
        env: dict[str, str] | None,
        timeout: float | None,  # noqa: ASYNC109
        user: str | None,
        stdin: bytes | None,
        extra: Header,
    ) -> ExecResult:
        client = self._running_client()
        user = user or self.spec.user
        if user not in USERS:
            raise SandboxError(f"exec user must be one of {USERS}, got {user!r}")
        if timeout is not None and timeout <= 0:
            raise SandboxError(f"exec timeout must be positive, got {timeout}")
        cg = self._cgroup
        before = dict(cg.counters) if cg is not None else {}
        request = {
            "op": "exec",
            "cmd": command,
            "cwd": cwd or self.spec.workdir,
            "env": self._env(user, env),
            "user": user,
            "timeout": timeout,
            "stdin": stdin is not None,
            "max_output": self.spec.max_output_bytes,
            **extra,
        }
        t0 = time.perf_counter()
        reply = await client.request(request, stdin or b"")
        duration = time.perf_counter() - t0
        h = reply.header
        return ExecResult(
            stdout_bytes=reply.stdout,
            stderr_bytes=reply.stderr,
            exit_code=h["code"],
            timed_out=h["timed_out"],
            duration=duration,
            limits_hit=self._limits_hit(before, h.get("free")),
            stdout_total_bytes=h.get("out_total"),
            stdout_head_bytes=h.get("out_head"),
            stderr_total_bytes=h.get("err_total"),
            stderr_head_bytes=h.get("err_head"),
        )

    async def exec_program(
        self,
        argv: list[str],
        *,
        output_file: str | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the Sandbox protocol's per-command limit
        user: str | None = None,
    ) -> ExecResult:
        """Run a program directly (no shell; `argv[0]` looked up on PATH), stdin empty. With `output_file`,
        its stdout and stderr go to that file inside the sandbox (created or truncated as `user`), like
        `exec prog > file 2>&1 < /dev/null` but one process fewer; else they come back as with `exec`."""
        if not argv or not all(isinstance(a, str) for a in argv) or not argv[0]:
            raise SandboxError(f"exec_program needs a non-empty argv of strings, got {argv!r}")
        extra: Header = {"argv": list(argv)}
        if output_file is not None:
            extra["output"] = str(rootfs.sandbox_path(output_file))
        return await self._exec_request("", cwd, env, timeout, user, None, extra)

    async def run_verifier(
        self,
        argv: list[str],
        *,
        tests: bytes,
        output_file: str,
        user: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the Sandbox protocol's per-command limit
    ) -> ExecResult:
        """Run `argv` as a verification run: in a mount namespace of its own with fresh tmpfs (each the size
        of the sandbox's /tmp) at /tests (holding `tests`), /logs/verifier (`user`'s) and /tmp (a copy of the
        agent's, without links), a read-only /etc/ld.so.preload of its own, marked so that no other process in
        the sandbox can reach into it (docs/sandbox.md, native/verifier.c). Its stderr starts with a line
        `evsys-integrity: <kind> <path>` for each verifier place the agent wrote (native/places.c)."""
        extra = {
            "argv": list(argv),
            "output": str(rootfs.sandbox_path(output_file)),
            "verifier": tmp_size_mb(self.spec) * 1024 * 1024,
            "since": self._fresh_since,
        }
        return await self._exec_request("", cwd, env, timeout, user, tests, extra)

    def _limits_hit(self, before: dict[str, int], free: int | None) -> list[LimitKind]:
        hits: list[LimitKind] = []
        cg = self._cgroup
        if cg is not None:
            after = cg.read_counters()
            cg.counters = after
            rose = {key.rpartition(".")[2] for key, value in after.items() if value > before.get(key, 0)}
            hits += [kind for kind in ("memory", "pids") if kind in rose]
        if free is not None and free < STORAGE_FULL_BYTES:
            hits.append("storage")
        return hits

    def _mark_limits(self) -> None:
        """Remember the limit counters now (a reset): `exhausted_limits` reports what was hit after this."""
        cg = self._cgroup
        if cg is not None:
            cg.reset_peak()
        self._limit_mark = cg.read_counters() if cg is not None else {}

    async def exhausted_limits(self) -> list[str]:
        """The sandbox's own limits hit since it started or was last reset (OOM kills at its memory limit,
        forks refused at its pids limit, a full /tmp or /dev/shm), each with the kernel's counters; also
        after its daemon died (until stop)."""
        return exhaustion_evidence(self._cgroup, self._limit_mark, self._live_daemon_pid())

    async def spawn(
        self,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - a deadline the daemon enforces
        stdin: bytes = b"",
    ) -> SandboxProcess:
        """Start a long-lived process (looked up on PATH) with streaming stdin/stdout/stderr."""
        client = self._running_client()
        user = user or self.spec.user
        if user not in USERS:
            raise SandboxError(f"spawn user must be one of {USERS}, got {user!r}")
        if not argv or not all(isinstance(a, str) and a for a in argv):
            raise SandboxError(f"spawn needs a non-empty argv of non-empty strings, got {argv!r}")
        request = {
            "op": "spawn",
            "argv": list(argv),
            "cwd": cwd or self.spec.workdir,
            "env": self._env(user, env),
            "user": user,
            "timeout": timeout,
        }
        process = SandboxProcess(client, argv)
        await process._start(request, stdin)
        return process

    async def shell(self, *, cwd: str | None = None, user: str | None = None) -> ExecShellSession:
        """A stateful shell: cwd and exported variables persist between `run` calls."""
        self._running_client()
        user = user or self.spec.user
        if user not in USERS:
            raise SandboxError(f"shell user must be one of {USERS}, got {user!r}")
        self._shells += 1
        return ExecShellSession(self, session_id=self._shells, cwd=cwd or self.spec.workdir, user=user)

    async def kill_processes(self) -> int:
        """SIGKILL every process started through exec/shell (the daemon survives); return how many."""
        reply = await self._running_client().request({"op": "kill"})
        return int(reply.header["count"])
