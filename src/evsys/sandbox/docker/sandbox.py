"""`DockerSandbox`: a sandbox as a container of a Docker Engine (or podman's Docker-compatible service).

One container per sandbox, started from the spec's image (`SandboxSpec.image.ref`; tasks without an image run
on `$EVSYS_DOCKER_BASE_IMAGE`, default `debian:bookworm-slim`). As Harbor's Docker environment does, the
image's ENTRYPOINT is kept and CMD becomes a keep-alive (`sleep infinity`), under the daemon's init (which
reaps orphans), so an entrypoint that starts a service and then `exec "$@"` has done its work before the agent
starts. Commands run through `docker exec` as the spec's user; a timeout kills the command's whole process
tree. `no-network` is `network_mode=none`; `public` is the daemon's default bridge. Limits: memory (swap
included), CPUs and pids. Every container carries labels naming the orchestrator that started it, so
`cleanup_stale` removes what a killed orchestrator left behind."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shlex
import socket
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from evsys.records import ExecResult, NetworkMode, SandboxSpec
from evsys.sandbox.base import Capability, Sandbox, SandboxError, SandboxUnsupported
from evsys.sandbox.docker import api, pods, scripts
from evsys.sandbox.entrypoint import settle_script
from evsys.util.tarsafe import tar_of

DEFAULT_BASE_IMAGE = "debian:bookworm-slim"
LABEL_SANDBOX = "org.evsys.sandbox"
LABEL_OWNER = "org.evsys.owner"  # host:pid:start-time of the orchestrator that started the container
KEEP_ALIVE = ["sleep", "infinity"]
STOP_GRACE_SEC = 5.0
UNKNOWN_USER_CODE = 126  # what the OCI runtime answers when an exec's user does not exist


def public_network() -> str:
    """The daemon network `public` sandboxes join: $EVSYS_DOCKER_NETWORK, else the default bridge."""
    return os.environ.get("EVSYS_DOCKER_NETWORK") or "bridge"


def _owner() -> str:
    """This orchestrator as `host:pid:start-time` (a pid alone can be reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def _owner_alive(owner: str) -> bool:
    host, _, rest = owner.partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's (or an unreadable) label: never ours to judge
    return Path(f"/proc/{pid}").exists() and _start_time(int(pid)) == started


class DockerSandbox(Sandbox):
    """A sandbox in a Docker container (see the module docstring)."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.IMAGES, Capability.SWITCH_NETWORK, Capability.PODS}
    )
    network_modes: ClassVar[frozenset[NetworkMode]] = frozenset({"no-network", "public"})

    def __init__(self, spec: SandboxSpec) -> None:
        super().__init__(spec)
        self.container_id: str | None = None
        self._stopped = False

    @classmethod
    async def unavailable(cls) -> str | None:
        """Why no container can run here: the SDK missing or the daemon unreachable."""
        try:
            await asyncio.to_thread(lambda: api.client().ping())
        except SandboxError as exc:
            return str(exc)
        except Exception as exc:
            return f"the Docker daemon at {api.docker_host() or 'the default socket'} does not answer: {exc}"
        return None

    @classmethod
    async def cleanup_stale(cls) -> int:
        """Remove containers whose orchestrator (on this host) is gone; return how many."""
        return await asyncio.to_thread(cls._cleanup_stale_sync)

    @classmethod
    def _cleanup_stale_sync(cls) -> int:
        removed = 0
        for container in api.client().containers.list(all=True, filters={"label": LABEL_SANDBOX}):
            if not _owner_alive(container.labels.get(LABEL_OWNER, "")):
                with contextlib.suppress(Exception):
                    container.remove(force=True)
                    removed += 1
        return removed

    # ---------------------------------------------------------------- lifecycle
    def image_ref(self) -> str:
        """The image this sandbox runs."""
        if self.spec.image is not None:
            return self.spec.image.ref
        return os.environ.get("EVSYS_DOCKER_BASE_IMAGE") or DEFAULT_BASE_IMAGE

    async def start(self) -> None:
        """Create and start the container, then make the agent user and the trial directories."""
        if self.container_id is not None:
            raise SandboxError(f"sandbox {self.spec.name} is already started")
        try:
            self.container_id = await asyncio.to_thread(self._create)
        except SandboxError:
            raise
        except Exception as exc:
            raise SandboxError(f"sandbox {self.spec.name}: the container could not start: {exc}") from None
        try:
            for copy in self.spec.files:
                await self._put(copy.src, copy.dst, exclude=copy.exclude)
            await self._root(scripts.prepare(self.spec.workdir), "preparing the container")
            await self._run_plain(scripts.find_keep_alive(), user="root")
            if self.spec.run_entrypoint and self.spec.image is not None and self.spec.image.config.entrypoint:
                await self._run_plain(["/bin/sh", "-c", settle_script()], user="root")  # its services up
        except BaseException:
            await self.stop()
            raise

    def _create(self) -> str:
        client = api.client()
        ref = self._ensure_image()
        # a sidecar's service process is started by the caller: the image's ENTRYPOINT is not run
        process = {"command": KEEP_ALIVE} if self.spec.run_entrypoint else {"entrypoint": KEEP_ALIVE}
        container = client.containers.create(
            ref,
            **process,
            name=f"evsys-{self.spec.name}"[:120],
            user="0",
            working_dir="/",
            environment=dict(self.spec.env),
            labels={LABEL_SANDBOX: self.spec.name, LABEL_OWNER: _owner()},
            detach=True,
            init=True,  # the daemon's init reaps orphans: zombies would count against the pids limit
            **self._network_options(),
            **self._limits(),
        )
        container.start()
        if self.spec.pod is not None and pods.OWNERS.owner(self.spec.pod) is None:
            pods.OWNERS.register(self.spec.pod, container.id)
        return str(container.id)  # the SDK's client is untyped

    def _network_options(self) -> dict[str, Any]:
        """No network or the public one; in a pod, its owner's network namespace and the pod's names."""
        pod = self.spec.pod
        own = {"network_mode": "none" if self.spec.network == "no-network" else public_network()}
        if pod is None:
            return {**own, "hostname": "sandbox"}
        joined = pods.OWNERS.owner(pod)
        if joined is not None:  # its hostname and /etc/hosts are the owner's too
            return {"network_mode": f"container:{joined}"}
        return {**own, "hostname": "sandbox", "extra_hosts": pods.extra_hosts(pod)}

    def _ensure_image(self) -> str:
        """The image's name in the daemon: an image from evsys's storage is loaded there once per content
        (`ImageSpec.image_id`) and run by that content's name, never by a same-named image the daemon holds;
        any other image must be in the daemon already."""
        image = self.spec.image
        if image is not None and image.source is not None and image.image_id is not None:
            return api.load_content(image.source, image.image_id)
        docker = api.sdk()
        ref = self.image_ref()
        try:
            api.client().images.get(ref)
            return ref
        except docker.errors.ImageNotFound:
            pass
        source = image.source if image is not None else None
        if source is None:
            raise SandboxError(
                f"sandbox {self.spec.name}: image {ref!r} is not in the Docker daemon "
                f"({api.docker_host() or 'default socket'}); build or load it first (evsys image build)"
            )
        api.load_image(source, ref)
        return ref

    def _limits(self) -> dict[str, Any]:
        spec = self.spec
        limits: dict[str, Any] = {"pids_limit": spec.pids_max, "security_opt": ["no-new-privileges"]}
        if spec.memory_mb is not None:
            limits["mem_limit"] = f"{spec.memory_mb}m"
            limits["memswap_limit"] = f"{spec.memory_mb}m"
        if spec.cpus is not None:
            limits["nano_cpus"] = int(spec.cpus * 1e9)
        return limits

    async def stop(self) -> None:
        """Remove the container (with everything in it). Idempotent; fine before `start`."""
        container_id, self.container_id = self.container_id, None
        if container_id is None:
            return
        docker = api.sdk()

        def remove() -> None:
            with contextlib.suppress(docker.errors.NotFound):
                api.client().api.remove_container(container_id, force=True, v=True)
            if self.spec.pod is not None:
                pods.OWNERS.unregister(self.spec.pod, container_id)

        await asyncio.shield(asyncio.to_thread(remove))

    # ---------------------------------------------------------------- commands
    def _require_running(self) -> str:
        if self.container_id is None:
            raise SandboxError(f"sandbox {self.spec.name} is not running")
        return self.container_id

    async def exec(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the command's own limit
        user: str | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run `command` with `bash -c` through `docker exec`; a timeout kills its whole process tree."""
        container_id = self._require_running()
        user = user or self.spec.user
        pid_file = f"{scripts.PID_DIR}/{secrets.token_hex(8)}"
        started = time.monotonic()
        try:
            stream = await asyncio.to_thread(
                api.start_exec,
                container_id,
                scripts.wrap(command, pid_file),
                user=user,
                workdir=cwd or self.spec.workdir,
                env=env or {},
                stdin=stdin,
                cap=self.spec.max_output_bytes,
            )
        except Exception as exc:
            raise SandboxError(f"sandbox {self.spec.name}: exec failed to start: {exc}") from None
        reader = asyncio.ensure_future(asyncio.to_thread(api.read_exec, stream))
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(reader), timeout)
        except TimeoutError:
            timed_out = True
            await self._kill_exec(pid_file, user)
            await self._drain(reader, stream)
        except asyncio.CancelledError:
            await self._kill_exec(pid_file, user)
            api.close_exec(stream)
            raise
        code = await asyncio.to_thread(api.exit_code, stream.exec_id)
        api.close_exec(stream)
        if code == UNKNOWN_USER_CODE and b"unable to find user" in stream.stdout.value():
            raise SandboxError(f"sandbox {self.spec.name}: no user {user!r} in the container")
        out, err = stream.stdout, stream.stderr
        return ExecResult(
            stdout_bytes=bytes(out.head + out.tail),
            stderr_bytes=bytes(err.head + err.tail),
            stdout_total_bytes=out.total,
            stdout_head_bytes=len(out.head),
            stderr_total_bytes=err.total,
            stderr_head_bytes=len(err.head),
            exit_code=-9 if timed_out else (code if code is not None else -1),
            timed_out=timed_out,
            duration=time.monotonic() - started,
        )

    async def _kill_exec(self, pid_file: str, user: str) -> None:
        with contextlib.suppress(SandboxError):
            await self._run_plain(scripts.kill_tree(pid_file, user), user="root")

    async def _drain(self, reader: asyncio.Future[None], stream: api.ExecStream) -> None:
        """Wait briefly for the killed exec's stream to end; close it when something still holds it open."""
        try:
            await asyncio.wait_for(asyncio.shield(reader), STOP_GRACE_SEC)
        except TimeoutError:
            api.close_exec(stream)
            await reader

    async def _run_plain(self, argv: list[str], *, user: str, stdin: bytes | None = None) -> ExecResult:
        """An exec of evsys's own (no pid file, no timeout)."""
        container_id = self._require_running()
        try:
            stream = await asyncio.to_thread(
                api.start_exec, container_id, argv, user=user, workdir="/", env={}, stdin=stdin
            )
            await asyncio.to_thread(api.read_exec, stream)
            code = await asyncio.to_thread(api.exit_code, stream.exec_id)
        except Exception as exc:
            raise SandboxError(f"sandbox {self.spec.name}: {shlex.join(argv[:2])}... failed: {exc}") from None
        api.close_exec(stream)
        return ExecResult(
            stdout_bytes=stream.stdout.value(), stderr_bytes=stream.stderr.value(), exit_code=code or 0
        )

    async def _root(self, script: str, what: str) -> ExecResult:
        result = await self._run_plain(["/bin/bash", "-c", script], user="root")
        if result.exit_code != 0:
            raise SandboxError(f"sandbox {self.spec.name}: {what} failed: {result.stderr.strip()[-500:]}")
        return result

    async def set_network(self, mode: NetworkMode, allowed_hosts: Sequence[str] = ()) -> None:
        """Between a trial's phases: a container started on the bridge is disconnected from it for
        `no-network` (only `lo` is left) and connected again for `public`; one started with
        `network_mode=none` cannot be given a network."""
        container_id = self._require_running()
        if mode not in self.network_modes:
            raise SandboxUnsupported(f"sandbox {self.spec.name}: this backend has no {mode!r} networking")
        if self.spec.network == "no-network":
            if mode != "no-network":
                raise SandboxUnsupported(
                    f"sandbox {self.spec.name} was started without network; it cannot be given {mode!r}"
                )
            return

        # a pod member's network is its pod's owner's
        target = (pods.OWNERS.owner(self.spec.pod) if self.spec.pod is not None else None) or container_id

        def switch() -> None:
            bridge = api.client().networks.get(public_network())
            attached = target in {c.id for c in bridge.containers}
            if mode == "public" and not attached:
                bridge.connect(target)
            elif mode == "no-network" and attached:
                bridge.disconnect(target, force=True)

        try:
            await asyncio.to_thread(switch)
        except Exception as exc:
            raise SandboxError(f"sandbox {self.spec.name}: switching to {mode!r} failed: {exc}") from None

    async def kill_processes(self) -> int:
        """Kill every process in the container except its keep-alive (pid 1); return how many there were."""
        result = await self._run_plain(scripts.kill_all(), user="root")
        try:
            return int(result.stdout.strip() or 0)
        except ValueError:
            return 0

    # ---------------------------------------------------------------- files, through the archive API
    async def _put(self, src: Path, dst: str, exclude: tuple[str, ...] = ()) -> None:
        src = Path(src)
        if not src.exists():
            raise SandboxError(f"upload source {src} does not exist")
        target = PurePosixPath(dst)
        target_dir, arcname = (target, ".") if src.is_dir() else (target.parent, target.name)
        data = await asyncio.to_thread(tar_of, src, arcname, exclude)
        await self._root(f"mkdir -p {shlex.quote(str(target_dir))}", f"creating {target_dir}")
        container_id = self._require_running()
        ok = await asyncio.to_thread(api.client().api.put_archive, container_id, str(target_dir), data)
        if not ok:
            raise SandboxError(f"sandbox {self.spec.name}: copying {src} to {dst} failed")

    async def upload(self, src: Path, dst: str) -> None:
        """Copy a host file or directory to `dst` inside the container (modes kept, owned by root)."""
        await self._put(src, dst)

    async def download_tar(self, src: str) -> bytes:
        """A tar holding the container path `src` under its base name, through the archive API."""
        container_id = self._require_running()
        docker = api.sdk()

        def fetch() -> bytes:
            chunks, _ = api.client().api.get_archive(container_id, src)
            return b"".join(chunks)

        try:
            return await asyncio.to_thread(fetch)
        except docker.errors.NotFound:
            raise SandboxError(f"sandbox {self.spec.name}: {src} does not exist") from None
        except docker.errors.APIError as exc:
            raise SandboxError(f"sandbox {self.spec.name}: reading {src} failed: {exc}") from None
