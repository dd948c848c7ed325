"""LocalSandbox: bubblewrap + per-trial overlayfs + cgroups + an in-sandbox exec daemon (docs/sandbox.md)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Sequence
from pathlib import Path

from evsys.records import Bind, NetworkMode, SandboxSpec
from evsys.sandbox.base import (
    SOLUTION_DIR,
    TESTS_DIR,
    VERIFIER_LOGS_DIR,
    Capability,
    Sandbox,
    SandboxError,
    SandboxUnsupported,
)
from evsys.sandbox.entrypoint import run_entrypoint
from evsys.sandbox.local import allowlist, cgroups, imageroot, limits, native, pods, rootfs, stale, uids
from evsys.sandbox.local.bwrap import (
    JOBS_TMPFS_MB,
    bwrap_argv,
    shm_size_mb,
    storage_size_mb,
    tmp_size_mb,
)
from evsys.sandbox.local.cgsetup import daemon_arguments
from evsys.sandbox.local.client import DaemonClient
from evsys.sandbox.local.commands import USERS, LocalCommandsMixin
from evsys.sandbox.local.doctor import missing_requirement_once
from evsys.sandbox.local.files import LocalFilesMixin
from evsys.sandbox.local.mounts import ChildSetup
from evsys.sandbox.local.pylayer import host_lowers
from evsys.sandbox.local.reset import (
    ResetTarget,
    close_target,
    daemon_pid,
    inherited_state,
    run_reset_helper,
)
from evsys.sandbox.local.seccomp import seccomp_fd
from evsys.sandbox.local.slirp import SlirpNetwork, slirp_binary
from evsys.sandbox.local.spawn import CgroupDirsRefused, SpawnedProcess, spawn

START_TIMEOUT = 30.0
EXIT_WAIT = 120.0  # seconds a stopped sandbox's killed processes may take to exit (unmounting a huge root)
# Where a bind may not go: the sandbox's own machinery, the host system dirs, and the verifier's places.
BIND_FORBIDDEN = ("/", "/proc", "/dev", "/etc", "/tmp", "/.evsys", TESTS_DIR, SOLUTION_DIR, VERIFIER_LOGS_DIR)


def default_scratch_root() -> Path:
    """Host dir for cached layers and the mount point ($EVSYS_SANDBOX_DIR or /var/tmp/evsys-sandbox)."""
    return Path(os.environ.get("EVSYS_SANDBOX_DIR", "/var/tmp/evsys-sandbox"))


class LocalSandbox(LocalCommandsMixin, LocalFilesMixin, Sandbox):
    """A sandbox on this machine. Use `async with LocalSandbox(spec) as sb:` or call `start()`/`stop()`."""

    capabilities = frozenset(
        {
            Capability.RESET,
            Capability.SPAWN,
            Capability.BINDS,
            Capability.LIMITS,
            Capability.IMAGES,
            Capability.SWITCH_NETWORK,
            Capability.PODS,
            Capability.PRIVATE_VERIFIER,
            Capability.HOST_ROOTFS,
        }
    )
    network_modes = frozenset({"no-network", "public", "allowlist"})

    def __init__(self, spec: SandboxSpec, *, scratch_root: Path | None = None) -> None:
        super().__init__(spec)
        self.scratch_root = Path(scratch_root) if scratch_root is not None else default_scratch_root()
        self._proc: SpawnedProcess | None = None
        self._client: DaemonClient | None = None
        self._cgroup: cgroups.SandboxCgroup | None = None
        self._state = "new"
        self._shells = 0
        self._reset_target: ResetTarget | None = None
        self._network: SlirpNetwork | None = None
        self._allowed: dict[str, list[str]] = {}
        self._switched = False  # set_network changed the rules since the sandbox started or was reset
        self._daemon: int | None = None
        self._uid: uids.AgentUid | None = None
        self._pod_owner: int | None = None  # this sandbox's daemon pid when its namespace is its pod's
        self._limit_mark: dict[str, int] = {}  # a new cgroup's counters are zero
        self._was_reset = False  # its upper layer is then a detached mount (written_layer)

    @property
    def agent_uid(self) -> int | None:
        """The host uid the sandbox's `agent` user has (its own; kept across resets), None unless started."""
        return self._uid.uid if self._uid is not None else None

    def written_layer(self) -> tuple[Path, int] | None:
        """The overlay's upper layer as the host reaches it (through bwrap's mount namespace, which holds the
        sandbox's storage tmpfs) and the sandbox's agent uid; None before start or after a reset (its new
        upper layer is a detached mount)."""
        if self._proc is None or self._uid is None or self._was_reset:
            return None
        mount_point = (self.scratch_root / "mnt").absolute()
        return Path(f"/proc/{self._proc.pid}/root{mount_point}/upper"), self._uid.uid

    def extra_uid(self, index: int) -> int:
        """The uid of the sandbox's `index`-th extra user (a shared slot's): one of its own block, after the
        agent's, so no other sandbox or host user has it and root inside may switch to it."""
        if self._uid is None or not 0 <= index < uids.UID_BLOCK - 1:
            raise SandboxError(f"sandbox {self.spec.name}: no extra uid {index} (0..{uids.UID_BLOCK - 2})")
        return self._uid.uid + 1 + index

    @classmethod
    def supports(cls, capability: Capability) -> bool:
        """The declared capabilities; LIMITS (memory and pids hits in `limits_hit`) only where both cgroup
        controllers are usable here (limits.py)."""
        if capability == Capability.LIMITS:
            return limits.reports_limit_hits(_cgroup_layout())
        return super().supports(capability)

    @classmethod
    async def unavailable(cls) -> str | None:
        """Why the local backend cannot run here (no bubblewrap, user namespaces or overlayfs), or None."""
        from evsys.sandbox.local.doctor import missing_requirement

        return await asyncio.to_thread(missing_requirement)

    @classmethod
    async def node_problem(cls) -> str | None:
        """`unavailable()`, then every failing required `evsys doctor` check (what a worker node must fix)."""
        from evsys.sandbox.local.doctor import required_problems

        return await asyncio.to_thread(required_problems)

    @classmethod
    async def cleanup_stale(cls) -> int:
        """Remove the cgroups of sandboxes whose orchestrator was killed (see stale.py)."""
        return await asyncio.to_thread(stale.cleanup_stale)

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Build (or reuse) the root layers, create cgroups, launch bwrap and wait for the daemon."""
        if self._state != "new":
            raise SandboxError(f"sandbox {self.spec.name} was already started")
        self._state = "starting"
        spec = self.spec
        if spec.user not in USERS:
            self._state = "stopped"
            raise SandboxError(f"sandbox {spec.name}: spec.user must be one of {USERS}, got {spec.user!r}")
        try:
            for bind in spec.binds:
                check_bind(bind)
        except SandboxError as exc:
            self._state = "stopped"
            raise SandboxError(f"sandbox {spec.name}: {exc}") from None
        try:
            await self._launch()
            self._state = "running"
            if spec.network == "allowlist":
                await allowlist.restrict(self, self._daemon_pid(), self._allowed)
            if spec.pod is not None:
                await self._root_script(pods.hosts_script(spec.pod), "naming the pod's services")
            await self._run_image_entrypoint()
        except BaseException:
            self._state = "stopped"
            await self._teardown()
            raise

    async def _launch(self) -> None:
        spec = self.spec
        problem = missing_requirement_once()  # fail at once, naming the fix, not somewhere in the setup
        if problem is not None:
            raise SandboxError(f"sandbox {spec.name}: the local sandbox cannot run here: {problem}")
        cache = self.scratch_root / "layers"
        if spec.network != "no-network":  # fail before starting anything when networking cannot work here
            slirp_binary()
        if spec.network == "allowlist":
            allowlist.nft_binary()
            self._allowed = await asyncio.to_thread(allowlist.resolve, spec.allowed_hosts)
        self._uid = uids.allocate(self.scratch_root)
        lowers, daemon_file = await asyncio.to_thread(self._prepare_layers, cache, self._uid.uid)
        self._lowers = tuple(lowers)
        layout = _cgroup_layout()
        limits.warn_unenforced(layout)
        # joining a v1 cpu cgroup costs milliseconds; only do it when there is a cpu limit to enforce
        skip = ("cpu",) if spec.cpus is None and layout.version == 1 else ()
        self._cgroup = cgroups.SandboxCgroup(layout, cgroups.cgroup_name(spec.name), skip=skip)
        items = self._cgroup.setup_items(memory_mb=spec.memory_mb, pids_max=spec.pids_max, cpus=spec.cpus)
        if "pids" not in layout.parents:  # the fallback (limits.py)
            items.append(f"nproc={spec.pids_max}")
        joined = pods.OWNERS.owner(spec.pod) if spec.pod is not None else None
        items.append("netns" if joined is None else pods.join_item(joined))  # members join the owner's
        if any(Path("/sys") in (src := bind.src.resolve(), *src.parents) for bind in spec.binds):
            items.append("keep-sys")  # else the setup step drops /sys, which bwrap would re-read per bind
        mount_point = self.scratch_root / "mnt"
        mount_point.mkdir(parents=True, exist_ok=True)
        setup = ChildSetup(
            mount_point=str(mount_point),
            lowers=lowers,
            storage_bytes=storage_size_mb(spec) * 1024 * 1024,
            items=items,
            helper=str(Path(daemon_file) / native.BINARY_NAME),
            agent_uid=self._uid.uid,
            cgroup_dirs=self._cgroup.dir_paths(),
        )
        sfd = seccomp_fd(range(self._uid.uid, self._uid.uid + uids.UID_BLOCK))
        try:
            extra = daemon_arguments(self._cgroup)  # the cgroup files of its children's scopes
            argv = bwrap_argv(
                spec, setup.root, str(daemon_file), "@fd0", agent_uid=self._uid.uid, daemon_args=extra
            )
            async with asyncio.timeout(START_TIMEOUT):
                self._proc = await spawn(argv, setup=setup.params, pass_fds=(sfd,), limit=1 << 22)
        except CgroupDirsRefused as exc:
            self._cgroup.forget_dirs()
            raise SandboxError(f"sandbox {spec.name}: {exc}") from None
        except SandboxError as exc:
            raise SandboxError(f"sandbox {spec.name}: {exc}") from None
        except TimeoutError:  # the setup (cgroups, mounts, idmapped layers) hangs: fail, never wait forever
            raise SandboxError(
                f"sandbox {spec.name}: its setup did not finish within {START_TIMEOUT:g} s "
                "(run `evsys doctor`)"
            ) from None
        finally:
            os.close(sfd)
        assert self._proc.stdout is not None and self._proc.stdin is not None
        self._client = DaemonClient(
            self._proc.stdout, self._proc.stdin, spec.name, self._proc.stderr, on_wedged=self._wedged
        )
        try:
            async with asyncio.timeout(START_TIMEOUT):
                await self._client.wait_ready()
        except (asyncio.IncompleteReadError, TimeoutError) as exc:
            detail = await self._stderr_text()
            raise SandboxError(
                f"sandbox {spec.name} failed to start: {detail or type(exc).__name__}"
            ) from None
        self._fresh_since = time.time()  # what is newer in its root, a process in it wrote
        if joined is not None:  # the pod's namespace: its owner set it up
            return
        if spec.network != "no-network":
            self._network = await SlirpNetwork.attach(self._daemon_pid())
        if spec.pod is not None:
            self._pod_owner = self._daemon_pid()
            pods.OWNERS.register(spec.pod, self._pod_owner)

    def _prepare_layers(self, cache: Path, agent_uid: int) -> tuple[list[str], Path]:
        spec = self.spec
        public = spec.network != "no-network"
        if spec.image is not None:
            try:
                image = imageroot.lower_layers(
                    cache, spec.image, workdir=spec.workdir, public_network=public, agent_uid=agent_uid
                )
            except OSError as exc:
                raise SandboxError(f"sandbox {spec.name}: {exc}") from None
            files = rootfs.files_layer(cache, spec.files, spec.workdir)
            return ([str(files)] if files is not None else []) + image, native.daemon_dir(cache)
        return host_lowers(cache, spec, agent_uid), native.daemon_dir(cache)

    async def _stderr_text(self) -> str:
        if self._proc is None or self._proc.stderr is None:
            return ""
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        with contextlib.suppress(TimeoutError):
            data = await asyncio.wait_for(self._proc.stderr.read(1 << 16), 5)
            return data.decode("utf-8", "replace").strip()
        return ""

    async def reset(self) -> None:
        """Return the running sandbox to its just-started state: every process killed, what the daemon passes
        on to commands put back (native/inherited.c), a fresh root (the cached layers and a new upper layer),
        fresh /tmp, /dev and /dev/pts, an empty IPC namespace, and a network a fresh sandbox's: the TCP
        sockets left in its namespace destroyed (their far ends closed through slirp4netns) and its connection
        tracking flushed (native/netreset.c), the spec's own filter again (allowlist: its hosts resolved
        again and pinned in /etc/hosts). Refused (SandboxError) for a pod's member, whose network its
        sidecars share, and when TCP sockets survive; after any error the sandbox is no longer usable:
        stop() it."""
        client = self._running_client()
        if self.spec.pod is not None:
            raise SandboxError(
                f"sandbox {self.spec.name}: a pod's member shares its network: it cannot be reset"
            )
        self._state = "resetting"
        try:
            killed = await client.request({"op": "kill"})
            if killed.header.get("left"):
                raise SandboxError(f"{killed.header['left']} processes survived SIGKILL")
            self._was_reset = True
            await run_reset_helper(self._target())
            self._fresh_since = time.time()
            await self._restore_rules()
        except SandboxError as exc:
            self._state = "broken"
            raise SandboxError(f"sandbox {self.spec.name}: {exc}") from None
        self._state = "running"
        if self.spec.network == "allowlist":  # the new root's /etc/hosts is the image's
            try:
                await allowlist.pin_hosts(self, self._allowed)
            except SandboxError:
                self._state = "broken"
                raise
        self._mark_limits()
        await self._run_image_entrypoint()

    async def _restore_rules(self) -> None:
        """After a reset: the spec's own filter again (a phase may have switched it; allowlist: its hosts
        resolved again). slirp4netns keeps running: the reset helper's destroying the sandbox's connections
        sent their peers (its NAT) a reset, which closes their far ends."""
        if self.spec.network == "no-network":
            return
        if self.spec.network == "allowlist":
            self._allowed = await asyncio.to_thread(allowlist.resolve, self.spec.allowed_hosts)
        if self.spec.network == "allowlist" or self._switched:
            await allowlist.apply_rules(
                self._daemon_pid(), allowlist.phase_rules(self.spec.network, self._allowed)
            )
        self._switched = False

    async def _run_image_entrypoint(self) -> None:
        """The image's ENTRYPOINT with a keep-alive, as Harbor's Docker environment runs it."""
        if self.spec.run_entrypoint and self.spec.image is not None and self.spec.image.config.entrypoint:
            await run_entrypoint(self, self.spec.image.config.entrypoint)

    async def set_network(self, mode: NetworkMode, allowed_hosts: Sequence[str] = ()) -> None:
        """Narrow (or widen back) the network of a sandbox started with networking, between phases of a
        trial: an nftables ruleset in its network namespace, replaced atomically. A sandbox started without
        network stays without (SandboxUnsupported for anything else)."""
        self._running_client()
        if self.spec.network == "no-network":
            if mode == "no-network":
                return
            raise SandboxUnsupported(
                f"sandbox {self.spec.name} was started without network; it cannot be given {mode!r}"
            )
        resolved: dict[str, list[str]] = {}
        if mode == "allowlist":
            resolved = await asyncio.to_thread(allowlist.resolve, list(allowed_hosts))
        self._switched = True  # a reset puts the spec's own rules back
        await allowlist.apply_rules(self._daemon_pid(), allowlist.phase_rules(mode, resolved))
        if mode == "allowlist":
            await allowlist.pin_hosts(self, resolved)

    def _wedged(self, reason: str) -> None:
        """The daemon stopped answering (or sent garbage): kill the sandbox at once; stop() cleans up."""
        self._state = "broken"
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    def _daemon_pid(self) -> int:
        """The host pid of the sandbox's daemon (read once from /proc)."""
        if self._daemon is None:
            assert self._proc is not None
            self._daemon = daemon_pid(self._proc.pid)
        return self._daemon

    def _live_daemon_pid(self) -> int | None:
        if self._proc is None or self._proc.returncode is not None:
            return None
        with contextlib.suppress(SandboxError, OSError):
            return self._daemon_pid()
        return None

    def _target(self) -> ResetTarget:
        if self._reset_target is None:
            assert self._proc is not None
            self._reset_target = ResetTarget.open(
                self._proc.pid,
                self._daemon_pid(),
                helper=str(native.daemon_dir(self.scratch_root / "layers") / native.BINARY_NAME),
                mount_point=str(self.scratch_root / "mnt"),
                storage_bytes=storage_size_mb(self.spec) * 1024 * 1024,
                lowers=self._lowers,
                tmp_bytes=tmp_size_mb(self.spec) * 1024 * 1024,
                jobs_bytes=JOBS_TMPFS_MB * 1024 * 1024,
                agent_uid=self._uid.uid if self._uid is not None else uids.LAYER_AGENT_UID,
                shm_bytes=shm_size_mb(self.spec) * 1024 * 1024,
                inherited=inherited_state(self._client.ready if self._client is not None else {}),
            )
        return self._reset_target

    async def stop(self) -> None:
        """Kill every process, drop the mount namespace and remove the cgroups. Idempotent."""
        if self._state in ("stopped", "new"):
            self._state = "stopped"
            return
        self._state = "stopped"
        await self._teardown()

    async def _root_script(self, script: str, what: str) -> None:
        result = await self.exec(script, user="root", timeout=30)
        if not result.ok:
            raise SandboxError(f"sandbox {self.spec.name}: {what} failed: {result.stderr.strip()[-300:]}")

    async def _teardown(self) -> None:
        if self._pod_owner is not None and self.spec.pod is not None:
            pods.OWNERS.unregister(self.spec.pod, self._pod_owner)
            self._pod_owner = None
        proc, client, cg, uid = self._proc, self._client, self._cgroup, self._uid
        self._uid = None
        close_target(self._reset_target)
        network, self._reset_target, self._network = self._network, None, None
        self._proc = self._client = self._cgroup = None
        killed = False
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()  # bwrap: its child, the daemon (the pid namespace's init), dies with it, and so
                killed = True  # does every process in the namespace (no fork succeeds in a dying namespace)
        if cg is not None:
            cg.kill_all(freeze=not killed)
        if client is not None:
            await client.close()
        if proc is not None:
            await proc.wait()
        if network is not None:
            await network.close()
        if cg is not None and not cg.try_remove():
            removed = await asyncio.to_thread(cgroups.remove_cgroup_dirs, cg)
            if not removed and not await _removed_after_exit(cg):
                raise SandboxError(  # the agent uid stays held too: processes may still run as it
                    f"sandbox {self.spec.name}: processes survived stop(); cgroup {cg.dirs} kept"
                )
        if uid is not None:  # every process of the sandbox is gone: nothing runs as its uid any more
            uid.release()

    # ---------------------------------------------------------------- commands
    def _running_client(self) -> DaemonClient:
        if self._state != "running" or self._client is None:
            raise SandboxError(f"sandbox {self.spec.name} is not running (state: {self._state})")
        return self._client


_LAYOUT: tuple[int, cgroups.CgroupLayout] | None = None


def _cgroup_layout() -> cgroups.CgroupLayout:
    """The cgroup layout, detected once per process (it reads /proc/self/cgroup and the mounts)."""
    global _LAYOUT
    if _LAYOUT is None or _LAYOUT[0] != os.getpid():
        _LAYOUT = (os.getpid(), cgroups.detect_layout())
    return _LAYOUT[1]


async def _removed_after_exit(cg: cgroups.SandboxCgroup) -> bool:
    """Wait (without spinning) for killed processes that are still exiting, then remove the cgroup: the last
    process of a sandbox unmounts its root, which takes seconds when the agent left 100,000s of files."""
    deadline = time.monotonic() + EXIT_WAIT
    while time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        if cg.pids():
            cg.kill_all(freeze=False)
        elif cg.try_remove():
            return True
    return cg.try_remove()


def check_bind(bind: Bind) -> None:
    """Refuse binds whose source is missing or whose target would cover the sandbox's machinery."""
    dst = str(rootfs.sandbox_path(bind.dst))
    if not bind.src.exists():
        raise SandboxError(f"bind source {bind.src} does not exist")
    system = tuple(f"/{name}" for name in rootfs.SYSTEM_DIRS)
    for place in (*BIND_FORBIDDEN, *system):
        inside = dst == place or (place != "/" and dst.startswith(place + "/"))
        if inside or (dst != "/" and place.startswith(dst + "/")):
            raise SandboxError(f"bind target {bind.dst!r} would cover {place}; choose another path")
