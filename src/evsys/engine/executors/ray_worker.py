"""The worker half of the Ray executor: what runs on a cluster node for each trial.

A trial arrives as its `TrialSpec` (JSON) plus, for a task directory, a `ShippedTask`: the directory packed
once per job by the driver and put in Ray's object store. A node extracts each packed directory once into
`$EVSYS_CACHE_DIR/ray-tasks/<digest>/` (later trials, and later jobs with the same files, find it there) and
runs the trial from that copy. The trial runs in a scratch job directory and comes back as (result JSON, tar
of the trial's files); the driver commits it with `JobStore.import_trial`.

`WorkerRuntime` is what stays warm in a worker process between trials: one event loop (in a thread, so a Ray
task can wait on it and still be interrupted by `ray.cancel`), the model clients built from model strings,
and the sandbox pool. `TrialRunner` is the same runtime as an async Ray actor (one per node). Before its
first trial a process checks that its node can run the trial's sandbox backend (`evsys doctor`'s checks) and
raises `NodeNotReady` naming the node and what to fix.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import shutil
import socket
import tarfile
import tempfile
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from evsys.engine.executors.worker import TrialRuntime
from evsys.engine.run import PackedTrial, run_trial_packed
from evsys.engine.spec import TrialSpec
from evsys.sandbox.registry import sandbox_class
from evsys.task.python import VerifiedTask
from evsys.util.tarsafe import links_stay_inside

if TYPE_CHECKING:
    from ray import ObjectRef

TASK_CACHE = "ray-tasks"
POLL_SEC = 0.2  # how often a waiting Ray task wakes up, so `ray.cancel`'s KeyboardInterrupt lands promptly
CANCEL_WAIT_SEC = 30.0
# a worker process outlives its job (Ray keeps it for later tasks): its idle sandboxes are stopped once no
# trial has run in it for this long, instead of holding memory, uids and processes until Ray recycles it
IDLE_RELEASE_SEC = 30.0

Packed = tuple[str, bytes, str]  # (TrialResult JSON, tar of the trial directory, the Ray node's id)
Fetch = Callable[["ObjectRef[bytes]"], Awaitable[bytes]]
T = TypeVar("T")


class NodeNotReady(RuntimeError):
    """This node cannot run trials (a sandbox prerequisite is missing); the message says what to fix."""


@dataclass
class ShippedTask:
    """A task directory packed once per job: its path on the driver, a digest of its files, and the packed
    bytes in Ray's object store (inside a list, so Ray fetches them only when the node has no copy yet)."""

    root: str
    digest: str
    blob: list[ObjectRef[bytes]] = field(default_factory=list)


def pack_directory(path: Path) -> tuple[str, bytes]:
    """A deterministic tar of `path` (sorted, owners dropped) and the sha256 of it."""
    buf = io.BytesIO()

    def normalise(member: tarfile.TarInfo) -> tarfile.TarInfo:
        member.uid = member.gid = 0
        member.uname = member.gname = ""
        return member

    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for item in sorted(path.rglob("*")):
            tar.add(item, arcname=str(item.relative_to(path)), recursive=False, filter=normalise)
    data = buf.getvalue()
    return hashlib.sha256(data).hexdigest()[:32], data


def _cache_root() -> Path:
    return Path(os.environ.get("EVSYS_CACHE_DIR") or str(Path.home() / ".cache" / "evsys"))


def task_cache_dir() -> Path:
    """Where nodes keep extracted task directories: $EVSYS_CACHE_DIR/ray-tasks (default ~/.cache/evsys)."""
    return _cache_root() / TASK_CACHE


def scratch_root() -> Path:
    """Where a worker runs trials before packing them: $EVSYS_CACHE_DIR/ray-scratch (on the cache's disk: a
    busy /tmp can make each new file cost a millisecond)."""
    return _cache_root() / "ray-scratch"


async def materialise(shipped: ShippedTask, fetch: Fetch) -> Path:
    """The node's copy of a shipped task directory, extracted on first use. `fetch(ref)` returns the
    packed bytes (awaiting the object ref)."""
    dest = task_cache_dir() / shipped.digest
    if not dest.is_dir():
        data = await fetch(shipped.blob[0])
        await asyncio.to_thread(extract_task, data, dest)
    return dest


def extract_task(data: bytes, dest: Path) -> None:
    """Extract a packed task directory to `dest` (into a temp dir, then renamed, so a half-extracted copy is
    never used; a copy another worker of the node made first wins)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            tar.extractall(tmp, filter=links_stay_inside)
        os.rename(tmp, dest)
    except OSError:
        if not dest.is_dir():  # not a lost race with another worker of this node
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def relocate(spec: TrialSpec, root: str, local: Path) -> TrialSpec:
    """The spec with every path under the driver's `root` moved under the node's copy `local` (the task
    reference, a dataset's verifier module, a verifier named by file). The trial's config keeps the driver's
    paths, so its result and config.json read the same as with the local executor."""

    def moved(text: str) -> str:
        if text == root or text.startswith(root + "/"):
            return str(local) + text[len(root) :]
        return text

    ref = spec.task
    update: dict[str, Any] = {"path": Path(moved(str(ref.path))), "imports": [moved(m) for m in ref.imports]}
    task = ref.python_task
    if isinstance(task, VerifiedTask) and isinstance(task.verifier, str):
        update["python_task"] = task.model_copy(update={"verifier": moved(task.verifier)})
    return spec.model_copy(update={"task": ref.model_copy(update=update)})


_checked: dict[str, str | None] = {}


async def node_problem(backend: str) -> str | None:
    """Why this node cannot run the `backend` sandbox (`Sandbox.node_problem`), or None; checked once per
    process."""
    if backend not in _checked:
        _checked[backend] = await sandbox_class(backend).node_problem()
    return _checked[backend]


async def check_node(backend: str) -> None:
    """Raise `NodeNotReady` naming this node and what to fix unless it can run `backend` sandboxes."""
    problem = await node_problem(backend)
    if problem is not None:
        raise NodeNotReady(
            f"Ray node {socket.gethostname()} cannot run {backend!r} sandboxes: {problem}; "
            "run `evsys doctor` on that node"
        )


class WorkerRuntime(TrialRuntime):
    """A Ray worker process's `TrialRuntime`: checks its node before the first trial of a backend, removes
    what killed workers of the node left behind, and stops its idle sandboxes once no trial ran for a while
    (Ray keeps the process after the job)."""

    def __init__(self, *, reuse_sandboxes: bool = True, node_id: str = "") -> None:
        super().__init__(reuse_sandboxes=reuse_sandboxes)
        self.node_id = node_id
        self.cleaned: set[str] = set()
        self._running = 0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._releasing: set[asyncio.Future[Any]] = set()

    async def run(self, spec_json: str, shipped: ShippedTask | None, fetch: Fetch) -> Packed:
        """Run one trial here and pack it."""
        self._running += 1
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        try:
            return await self._run(TrialSpec.model_validate_json(spec_json), shipped, fetch)
        finally:
            self._running -= 1
            if self._running == 0:
                loop = asyncio.get_running_loop()
                self._idle_timer = loop.call_later(IDLE_RELEASE_SEC, self._release_idle)

    async def prepare_backend(self, backend: str) -> None:
        """Check the node can run `backend` sandboxes; remove what killed workers of this node left behind."""
        await check_node(backend)
        if backend not in self.cleaned:
            self.cleaned.add(backend)
            await sandbox_class(backend).cleanup_stale()

    async def _run(self, spec: TrialSpec, shipped: ShippedTask | None, fetch: Fetch) -> Packed:
        await self.prepare_backend(spec.sandbox)  # before fetching: a node that cannot run it says so first
        if shipped is not None:
            local = await materialise(shipped, fetch)
            spec = relocate(spec, shipped.root, local)
        resources = await self.resources(spec)
        packed: PackedTrial = await run_trial_packed(spec, resources, scratch_root())
        return packed.result.model_dump_json(), packed.files, self.node_id

    def _release_idle(self) -> None:
        """No trial ran for IDLE_RELEASE_SEC: stop the idle sandboxes (a later trial starts a new pool)."""
        self._idle_timer = None
        if self._running or not self.pools:
            return
        pools, self.pools = list(self.pools.values()), {}
        task = asyncio.ensure_future(asyncio.gather(*(pool.close() for pool in pools)))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def close(self) -> None:
        """Stop idle sandboxes and close the model clients."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        await super().close()


class _LoopThread:
    """An event loop in a daemon thread; a Ray task's main thread waits on it in short polls."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="evsys-ray-loop", daemon=True)
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop and wait; on KeyboardInterrupt (`ray.cancel`) cancel it, let it record the
        cancellation and release its sandbox, then re-raise."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            while True:
                try:
                    return future.result(timeout=POLL_SEC)
                except TimeoutError:
                    continue
        except KeyboardInterrupt:
            done = threading.Event()
            future.add_done_callback(lambda _f: done.set())
            self.loop.call_soon_threadsafe(future.cancel)
            done.wait(CANCEL_WAIT_SEC)
            raise


_process: list[tuple[_LoopThread, WorkerRuntime]] = []  # this worker process's, once made


def _process_runtime(reuse_sandboxes: bool) -> tuple[_LoopThread, WorkerRuntime]:
    """This worker process's loop and runtime (created on its first trial, kept for the next ones)."""
    if not _process:
        _process.append((_LoopThread(), WorkerRuntime(reuse_sandboxes=reuse_sandboxes, node_id=_node_id())))
    return _process[0]


def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def run_trial_task(spec_json: str, shipped: ShippedTask | None, reuse_sandboxes: bool) -> Packed:
    """The body of the Ray task that runs one trial (module-level so workers import it by name)."""
    import ray

    async def fetch(ref: ObjectRef[bytes]) -> bytes:
        return await asyncio.to_thread(ray.get, ref)

    loop, runtime = _process_runtime(reuse_sandboxes)
    return loop.call(runtime.run(spec_json, shipped, fetch))


class TrialRunner:
    """The body of the per-node async Ray actor: trials run concurrently on its event loop, sharing its
    sandbox pool and model clients for the whole job."""

    def __init__(self, reuse_sandboxes: bool = True) -> None:
        self.runtime = WorkerRuntime(reuse_sandboxes=reuse_sandboxes, node_id=_node_id())

    async def run(self, spec_json: str, shipped: ShippedTask | None) -> Packed:
        """Run one trial on this node."""

        async def fetch(ref: ObjectRef[bytes]) -> bytes:
            return await ref

        return await self.runtime.run(spec_json, shipped, fetch)

    async def close(self) -> None:
        """Release the node's warm sandboxes and model clients (at the end of the job)."""
        await self.runtime.close()
