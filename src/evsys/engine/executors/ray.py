"""`RayExecutor`: a job's trials run on the nodes of a Ray cluster; the driver keeps the job directory.

```
evsys run tasks/ -n 64 --executor ray --ray-address auto
await run_rollouts(items, model="vllm:...", executor="ray")        # RAY_ADDRESS, or a local Ray
```
The driver plans, retries, resumes and writes every file exactly as with the local executor; each trial goes
to the cluster as its `TrialSpec` and comes back as its result plus a tar of its files, which the driver
commits through the job's `JobStore` (evsys.engine.executors.ray_worker is the worker half).

Two ways to run (`mode`, see docs/scale.md for the measurements): `tasks` (default) submits one Ray task per
trial with the task's `cpus` and `memory_mb` as its Ray resources, so Ray's scheduler places it; worker
processes keep model clients (and, reusing sandboxes, a small sandbox pool) between trials. `actors` starts
one async actor per node for the job, which runs many trials on one event loop with a warm sandbox pool; the
driver places trials on nodes by their free CPUs and memory.

Failures: a trial whose worker process or node died is rescheduled (up to `max_worker_losses` times), each
loss recorded in the trial's `retries` as `worker_lost`; only the driver writes the job directory, so a trial
is never recorded twice. A node that cannot run the sandbox backend fails its trial as `sandbox_failed` with
what `evsys doctor` found. Cancelling (Ctrl-C) cancels the remote trials (their sandboxes are stopped) and
records them `cancelled`, for a resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evsys.engine.executors.base import Executor, ExecutorContext, ExecutorUnavailableError
from evsys.engine.executors.ray_worker import (
    NodeNotReady,
    Packed,
    ShippedTask,
    TrialRunner,
    pack_directory,
    run_trial_task,
)
from evsys.engine.executors.remote import WorkerLost, record_failure, run_rescheduled
from evsys.engine.run import run_trial
from evsys.engine.spec import PlannedTrial, TrialSpec
from evsys.records import FailureCause, TrialResult

if TYPE_CHECKING:
    from ray import ObjectRef

MB = 1024 * 1024


class RayOptions(BaseModel):
    """How the Ray executor connects and runs (`JobConfig(executor={"name": "ray", "options": ...})`,
    `evsys run --ray-*`)."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(
        None,
        description="The cluster (`auto`, `ray://host:10001`, `host:6379`); None: a Ray already initialised "
        "in this process, else $RAY_ADDRESS, else a new single-node Ray.",
    )
    mode: Literal["tasks", "actors"] = "tasks"
    namespace: str | None = None
    runtime_env: dict[str, Any] | None = Field(
        None,
        description="Ray runtime environment of the trials' workers (pip, env_vars, py_modules, ...), given "
        "to every trial's task or actor, so it applies whether or not Ray was initialised elsewhere.",
    )
    ship_tasks: bool = Field(
        True, description="Pack task directories once per job and ship them; False: nodes share the paths."
    )
    max_worker_losses: int = Field(3, ge=0, description="Reschedules of one trial after worker/node loss.")
    cancel_grace_sec: float = Field(10.0, ge=0, description="How long a cancelled trial may take to stop.")


def import_ray() -> Any:
    """The `ray` module, or `ExecutorUnavailableError` naming the extra to install."""
    try:
        import ray
    except ImportError as exc:
        raise ExecutorUnavailableError(
            "the ray executor needs Ray: pip install 'evsys[ray]' (on the driver and on every node)"
        ) from exc
    return ray


def trial_resources(planned: PlannedTrial) -> tuple[float, int | None]:
    """Ray resources of one trial: the task's `cpus` (default 1) and `memory_mb` (bytes; None: unset)."""
    env = planned.task.config.environment if planned.task is not None else None
    cpus = env.cpus if env is not None and env.cpus is not None else 1.0
    memory = env.memory_mb * MB if env is not None and env.memory_mb else None
    return float(cpus), memory


def _lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    exc = ray.exceptions
    return (
        exc.WorkerCrashedError,
        exc.NodeDiedError,
        exc.RayActorError,
        exc.ObjectLostError,
        exc.LocalRayletDiedError,
        exc.TaskCancelledError,  # a worker killed from outside (not by this executor) reads as cancelled
    )


async def await_trial(ray: Any, ref: ObjectRef[Packed], grace: float, *, force_cancel: bool = True) -> Packed:
    """The value of a trial's object ref. Worker/node loss raises `WorkerLost`, a node that cannot run
    sandboxes `NodeNotReady`; being cancelled cancels the remote trial (KeyboardInterrupt there, then a forced
    kill after `grace` seconds) before re-raising."""
    try:
        return await ref
    except asyncio.CancelledError:
        ray.cancel(ref)
        done = asyncio.wrap_future(ref.future())
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(done), grace)
        if force_cancel and not done.done():
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, NodeNotReady):
            raise NodeNotReady(str(exc.cause)) from None
        raise exc.as_instanceof_cause() from None
    except _lost_errors(ray) as exc:
        raise WorkerLost(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc


class RayExecutor(Executor):
    """Trials on a Ray cluster; see the module docstring."""

    name = "ray"
    options_model = RayOptions

    @classmethod
    def check_available(cls) -> None:
        """`ExecutorUnavailableError` unless Ray is installed."""
        import_ray()

    def __init__(self, ctx: ExecutorContext) -> None:
        super().__init__(ctx)
        options = self.parse_options(ctx.options)
        assert isinstance(options, RayOptions)  # parse_options gives this class's options_model
        self.options = options
        self.ray = import_ray()
        self._start_lock = asyncio.Lock()
        self._backend: TaskBackend | ActorBackend | None = None
        self._owns_ray = False
        self._shipped: dict[str, asyncio.Task[ShippedTask]] = {}
        self.worker_losses = 0  # trials rescheduled after their worker or node died
        self.trials_per_node: Counter[str] = Counter()  # trials committed, by the Ray node that ran them

    async def execute(self, planned: PlannedTrial) -> TrialResult:
        """Run one trial on the cluster and commit it; reschedule it when its worker or node is lost."""
        spec, store = planned.spec, self.ctx.store
        if spec.failure is not None:  # decided while planning: nothing runs, the driver records it
            return await run_trial(spec, store)
        try:
            backend = await self._start()
            shipped = await self._ship(spec)
        except Exception as exc:
            return await record_failure(store, spec, FailureCause.SANDBOX_FAILED, f"Ray: {exc}")
        cpus, memory = trial_resources(planned)

        async def attempt(current: TrialSpec) -> TrialResult:
            try:
                result_json, files, node = await backend.run(current, shipped, cpus, memory)
            except (NodeNotReady, Infeasible) as exc:
                return await record_failure(store, current, FailureCause.SANDBOX_FAILED, str(exc))
            result = TrialResult.model_validate_json(result_json)
            await store.import_trial(current.trial_name, files, result)
            self.trials_per_node[node] += 1
            return result

        return await run_rescheduled(
            store,
            spec,
            attempt,
            max_losses=self.options.max_worker_losses,
            worker="the Ray worker",
            on_loss=self._count_loss,
        )

    def _count_loss(self) -> None:
        self.worker_losses += 1

    async def _start(self) -> TaskBackend | ActorBackend:
        async with self._start_lock:
            if self._backend is None:
                await asyncio.to_thread(self._connect)
                backend_cls = ActorBackend if self.options.mode == "actors" else TaskBackend
                backend = backend_cls(self.ray, self.options, self.ctx.reuse_sandboxes)
                await backend.start()
                self._backend = backend
            return self._backend

    def _connect(self) -> None:
        if self.ray.is_initialized():
            return
        logging.getLogger("ray._private.worker").addFilter(drop_thread_sigterm_notice)
        self.ray.init(
            address=self.options.address,
            namespace=self.options.namespace,
            include_dashboard=False,
            log_to_driver=False,
        )
        self._owns_ray = True

    async def _ship(self, spec: TrialSpec) -> ShippedTask | None:
        """The task's directory packed and put in the object store, once per job (None when not shipped)."""
        root = _shipped_root(spec) if self.options.ship_tasks else None
        if root is None:
            return None
        if root not in self._shipped:
            self._shipped[root] = asyncio.create_task(self._pack(root))
        return await asyncio.shield(self._shipped[root])

    async def _pack(self, root: str) -> ShippedTask:
        digest, data = await asyncio.to_thread(pack_directory, Path(root))
        ref = await asyncio.to_thread(self.ray.put, data)
        return ShippedTask(root=root, digest=digest, blob=[ref])

    async def aclose(self) -> None:
        """Cancel what still runs, release the per-node actors, leave a Ray this executor started."""
        await super().aclose()
        if self._backend is not None:
            with contextlib.suppress(Exception):
                await self._backend.close()
        self._shipped.clear()
        if self._owns_ray:
            await asyncio.to_thread(self.ray.shutdown)


def _shipped_root(spec: TrialSpec) -> str | None:
    """The directory a trial needs from the driver: the task directory, or a Python dataset's directory
    (when it has a dataset.toml); None for a Python task handed over in memory only."""
    ref = spec.task
    if ref.kind == "directory":
        return str(ref.path)
    root = ref.path if ref.path.is_dir() else ref.path.parent
    return str(root) if (root / "dataset.toml").is_file() else None


class Infeasible(Exception):
    """No node of the cluster has the CPUs or memory a trial asks for."""


class TaskBackend:
    """One Ray task per trial, scheduled by Ray with the trial's resources."""

    def __init__(self, ray: Any, options: RayOptions, reuse_sandboxes: bool) -> None:
        self.ray, self.options, self.reuse = ray, options, reuse_sandboxes
        self.remote = ray.remote(run_trial_task)
        self.largest: tuple[float, float] = (0.0, 0.0)

    async def start(self) -> None:
        """Note the largest node, so a trial no node can hold fails instead of waiting forever."""
        nodes = await asyncio.to_thread(alive_nodes, self.ray)
        self.largest = max(((n["cpus"], n["memory"]) for n in nodes), default=(0.0, 0.0))

    async def run(
        self, spec: TrialSpec, shipped: ShippedTask | None, cpus: float, memory: int | None
    ) -> Packed:
        """Submit the trial as a Ray task and wait for it."""
        check_fits(cpus, memory, *self.largest)
        options: dict[str, Any] = {"num_cpus": cpus, "max_retries": 0, "name": f"evsys:{spec.trial_name}"}
        if memory:
            options["memory"] = memory
        if self.options.runtime_env:
            options["runtime_env"] = self.options.runtime_env
        ref: ObjectRef[Packed] = self.remote.options(**options).remote(
            spec.model_dump_json(), shipped, self.reuse
        )
        return await await_trial(self.ray, ref, self.options.cancel_grace_sec)

    async def close(self) -> None:
        """Nothing is held per job (worker processes are Ray's)."""


def alive_nodes(ray: Any) -> list[dict[str, Any]]:
    """The cluster's live nodes that can run trials: id, CPUs, memory (bytes)."""
    nodes = []
    for node in ray.nodes():
        resources = node.get("Resources", {})
        if node.get("Alive") and resources.get("CPU", 0) > 0:
            nodes.append(
                {"id": node["NodeID"], "cpus": resources["CPU"], "memory": resources.get("memory", 0.0)}
            )
    return nodes


def check_fits(cpus: float, memory: int | None, node_cpus: float, node_memory: float) -> None:
    """Raise `Infeasible` when the largest node cannot hold the trial."""
    if cpus > node_cpus or (memory and memory > node_memory):
        asked = f"{cpus:g} CPU{'' if cpus == 1 else 's'}" + (f" and {memory // MB} MB" if memory else "")
        raise Infeasible(
            f"the task asks for {asked}; the largest Ray node has {node_cpus:g} CPUs and "
            f"{int(node_memory) // MB} MB (add bigger nodes or lower the task's cpus/memory_mb)"
        )


class ActorBackend:
    """One async actor per node for the job; the driver places each trial on a node with room for it."""

    def __init__(self, ray: Any, options: RayOptions, reuse_sandboxes: bool) -> None:
        self.ray, self.options, self.reuse = ray, options, reuse_sandboxes
        self.actors: dict[str, Any] = {}
        self.free: dict[str, list[float]] = {}  # node id -> [free cpus, free memory]
        self.size: dict[str, tuple[float, float]] = {}
        self.dead: set[str] = set()
        self.changed = asyncio.Condition()

    async def start(self) -> None:
        """An actor on every live node that can run trials."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        runner = self.ray.remote(TrialRunner)
        for node in await asyncio.to_thread(alive_nodes, self.ray):
            if node["id"] in self.actors or node["id"] in self.dead:
                continue
            strategy = NodeAffinitySchedulingStrategy(node_id=node["id"], soft=False)
            extra = {"runtime_env": self.options.runtime_env} if self.options.runtime_env else {}
            self.actors[node["id"]] = runner.options(
                num_cpus=0, max_concurrency=1000, max_restarts=0, scheduling_strategy=strategy, **extra
            ).remote(self.reuse)
            self.free[node["id"]] = [node["cpus"], node["memory"]]
            self.size[node["id"]] = (node["cpus"], node["memory"])

    async def run(
        self, spec: TrialSpec, shipped: ShippedTask | None, cpus: float, memory: int | None
    ) -> Packed:
        """Wait for a node with room, run the trial on its actor, give the room back."""
        node = await self._reserve(cpus, memory or 0)
        try:
            actor = self.actors.get(node)
            if actor is None:  # the node was dropped since it was reserved
                raise WorkerLost("the node's actor is gone")
            ref: ObjectRef[Packed] = actor.run.remote(spec.model_dump_json(), shipped)
            return await await_trial(self.ray, ref, self.options.cancel_grace_sec, force_cancel=False)
        except WorkerLost:
            await self._drop(node)
            raise
        finally:
            async with self.changed:
                if node in self.free:
                    self.free[node][0] += cpus
                    self.free[node][1] += memory or 0
                self.changed.notify_all()

    async def _reserve(self, cpus: float, memory: int) -> str:
        async with self.changed:
            while True:
                if not self.actors:
                    raise WorkerLost("no Ray node is left to run trials")
                largest = max(self.size[n] for n in self.actors)
                check_fits(cpus, memory, *largest)
                fits = [n for n in self.actors if self.free[n][0] >= cpus and self.free[n][1] >= memory]
                if fits:
                    node = max(fits, key=lambda n: self.free[n][0])
                    self.free[node][0] -= cpus
                    self.free[node][1] -= memory
                    return node
                await self.changed.wait()

    async def _drop(self, node: str) -> None:
        async with self.changed:
            self.dead.add(node)
            self.actors.pop(node, None)
            self.free.pop(node, None)
            self.changed.notify_all()
        await self.start()  # nodes that joined since take over

    async def close(self) -> None:
        """Stop the actors' warm sandboxes, then the actors."""
        actors, self.actors = list(self.actors.values()), {}
        refs = [actor.close.remote() for actor in actors]
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*refs, return_exceptions=True), 30)
        for actor in actors:
            with contextlib.suppress(Exception):
                self.ray.kill(actor)


def drop_thread_sigterm_notice(record: logging.LogRecord) -> bool:
    """Drop Ray's "SIGTERM handler is not set because current thread is not the main thread": evsys calls
    `ray.init` from a worker thread on purpose and handles SIGTERM itself (a graceful cancel)."""
    return not record.getMessage().startswith("SIGTERM handler is not set")
