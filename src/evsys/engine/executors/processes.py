"""`ProcessExecutor`: a job's trials spread over worker processes on this machine, to use its cores.

```
evsys run tasks/ -a loop -m vllm:Qwen/Qwen3-8B --base-url http://infer:8000/v1 -n 1024 --executor processes
await run_rollouts(items, model="vllm:...", n_concurrent=1024, executor="processes")
```
One process runs every trial's orchestration on one core with the local executor; here K worker processes
(default: the cores this process may run on) each run many trials at once on their own event loop, and the
job's `-n` is split across them (a trial goes to the worker with the fewest in flight). The driver plans,
retries, resumes, shows progress and writes the job's own files; each trial writes its own directory from
its worker, through a `JobStore` of the same job directory, as an in-process trial does (one writer per trial
directory; every file atomic; result.json last and fsynced), so no trial's files are packed and copied.

Workers are fresh interpreters (evsys.engine.executors.process_worker, started with the executor, while the
driver plans), never forks of the driver. A worker that dies fails none of the other workers' trials: its
trials are submitted again (up to `max_worker_losses` times, each loss kept in the trial's `retries` as
`worker_lost`), a new worker takes its place and the sandboxes it left are cleaned up. Cancelling (Ctrl-C,
`job.cancel()`) cancels the trials in the workers, which record `cancelled`; a worker that does not finish
within `cancel_grace_sec` is killed and the driver records its trials. Trials whose model runs inside the
process (`local:` models) are refused: each worker would load its own copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evsys.engine.config import JobConfig
from evsys.engine.executors.base import Executor, ExecutorContext
from evsys.engine.executors.process_worker import encode, read_frame
from evsys.engine.executors.remote import CANCELLED_MESSAGE, WorkerLost, record_failure, run_rescheduled
from evsys.engine.run import run_trial
from evsys.engine.spec import PlannedTrial, TrialSpec
from evsys.records import FailureCause, TrialResult
from evsys.sandbox.registry import sandbox_class

BOOT = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from evsys.engine.executors.process_worker import main; main(sys.argv[1:])"
)
# `evsys run` picks this executor by itself (docs/scale.md, "Trials over worker processes") for a job of
# model-driven agents over HTTP at -n >= AUTO_MIN_CONCURRENCY on a machine with >= AUTO_MIN_CORES usable
# cores: measured, a trial's orchestration costs 2-4x the CPU spread over workers that it costs in one
# process (each worker ~0.9 s to start), so it pays off only with many cores to spread it over; on 2 cores
# it never did (bench/RESULTS.md, "Session 10")
AUTO_MIN_CONCURRENCY = 256
AUTO_MIN_CORES = 8
MAX_START_FAILURES = 3  # workers that die before their first trial: then the machine cannot run them at all
CLOSE_WAIT_SEC = 30.0


class ProcessOptions(BaseModel):
    """How the processes executor runs (`JobConfig(executor={"name": "processes", "options": ...})`)."""

    model_config = ConfigDict(extra="forbid")

    workers: int | None = Field(
        None,
        ge=1,
        description="Worker processes; None: the cores this process may run on (its CPU affinity).",
    )
    max_worker_losses: int = Field(3, ge=0, description="Reschedules of one trial after its worker died.")
    cancel_grace_sec: float = Field(10.0, ge=0, description="How long cancelled trials may take to stop.")


def usable_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0))


def in_process_models(config: JobConfig) -> list[str]:
    """The model strings of `config`'s agents whose model runs inside the orchestrator's process."""
    from evsys.agent.registry import talks_to_model
    from evsys.model.registry import model_provider

    found = []
    for agent in config.agents:
        if agent.model is None or not talks_to_model(agent.name, agent.model):
            continue
        provider = agent.model.partition(":")[0]
        with contextlib.suppress(ValueError):  # an unknown provider fails later with its own message
            if model_provider(provider).defaults.in_process:
                found.append(agent.model)
    return found


def prefers_processes(config: JobConfig, cores: int | None = None) -> bool:
    """Whether a job that names no executor should run on this one: every agent is model-driven with a model
    served over HTTP (none in-process, no `--agent-env` values), at -n >= AUTO_MIN_CONCURRENCY, with at least
    AUTO_MIN_CORES usable cores (`cores`, default this process's)."""
    from evsys.agent.registry import talks_to_model

    if config.n_concurrent < AUTO_MIN_CONCURRENCY or (cores or usable_cores()) < AUTO_MIN_CORES:
        return False
    if any(not talks_to_model(agent.name, agent.model) or agent.env for agent in config.agents):
        return False
    return not in_process_models(config)


class WorkerGone(Exception):
    """The worker processes cannot start at all (the message has the last one's exit)."""


class WorkerProcess:
    """One worker process and the trials it runs, by id."""

    def __init__(self, hello: dict[str, Any]) -> None:
        self.hello = hello
        self.proc: asyncio.subprocess.Process | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.pending: dict[int, asyncio.Future[tuple[dict[str, Any], bytes]]] = {}
        self.on_event: dict[int, Callable[[dict[str, Any]], None]] = {}
        self.trial_names: dict[int, str] = {}  # the trials it runs now, by id
        self.lost: str | None = None  # why it is gone, once it is
        self.in_flight = 0  # trials placed on it (counted by the executor when it picks it)
        self._ids = itertools.count()
        self._reader_task: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        """The worker's process id (None before it started)."""
        return self.proc.pid if self.proc is not None else None

    async def start(self) -> None:
        """Start the process and greet it; `ready` resolves when it answers (fails if it cannot start)."""
        ours, theirs = socket.socketpair()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                BOOT,
                json.dumps(sys.path),
                str(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=2,  # nothing of a worker's goes to evsys's own output
            )
            reader, self.writer = await asyncio.open_unix_connection(sock=ours)
        except OSError as exc:
            ours.close()
            self.lost = f"a worker process could not be started: {exc}"
            self.ready.set_exception(WorkerLost(self.lost))
            self.ready.exception()  # retrieved: the trials waiting on it get it through `_pick`
            return
        except BaseException:  # cancelled while starting: the worker sees EOF and exits
            ours.close()
            raise
        finally:
            theirs.close()
        self.writer.write(encode({"op": "hello", **self.hello}))
        self._reader_task = asyncio.create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        handlers = {"ready": self._on_ready, "event": self._on_event}
        while (frame := await read_frame(reader)) is not None:
            header, body = frame
            handlers.get(header["op"], self._on_reply)(header, body)
        await self._gone()

    def _on_ready(self, header: dict[str, Any], _body: bytes) -> None:
        self.ready.set_result(header["pid"])

    def _on_event(self, header: dict[str, Any], body: bytes) -> None:
        callback = self.on_event.get(header["id"])
        if callback is not None:
            callback(json.loads(body))

    def _on_reply(self, header: dict[str, Any], body: bytes) -> None:
        """A trial's answer (`done`, `cancelled`, `error`) to the trial waiting for it."""
        future = self.pending.get(header["id"])
        if future is not None and not future.done():
            future.set_result((header, body))

    async def _gone(self) -> None:
        """EOF from the worker: wait for its exit, then fail its trials saying how it ended."""
        assert self.proc is not None
        code = await self.proc.wait()
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
        self.lost = f"worker process {self.proc.pid} {how}"
        futures: list[asyncio.Future[Any]] = [self.ready, *self.pending.values()]
        for future in futures:
            if not future.done():
                future.set_exception(WorkerLost(self.lost))
                future.exception()  # retrieved here: a waiter, if any, still gets it

    async def run(
        self, spec: TrialSpec, on_event: Callable[[dict[str, Any]], None] | None, grace: float
    ) -> bytes | str:
        """Send the trial and wait for the worker's answer: the result JSON (bytes), or its error message.
        Cancelled, the worker is asked to cancel it too (it records `cancelled`) and given `grace` seconds;
        `CancelledNotRecorded` when the driver has to record it instead."""
        trial_id = next(self._ids)
        future: asyncio.Future[tuple[dict[str, Any], bytes]] = asyncio.get_running_loop().create_future()
        self.pending[trial_id] = future
        self.trial_names[trial_id] = spec.trial_name
        if on_event is not None:
            self.on_event[trial_id] = on_event
        try:
            header = {"op": "run", "id": trial_id, "events": on_event is not None}
            self._send(header, spec.model_dump_json().encode())
            try:
                reply, body = await asyncio.shield(future)
            except asyncio.CancelledError:
                if await self._cancel(trial_id, future, grace):
                    raise
                raise CancelledNotRecorded from None
            return body if reply["op"] == "done" else str(reply.get("message", ""))
        finally:
            self.pending.pop(trial_id, None)
            self.trial_names.pop(trial_id, None)
            self.on_event.pop(trial_id, None)

    async def _cancel(self, trial_id: int, future: asyncio.Future[Any], grace: float) -> bool:
        """Cancel the trial in the worker; True once its result.json holds its end (`cancelled`, or the
        result it reached first). A worker that does not answer in time is killed, so that only the driver
        writes the trial afterwards."""
        self._send({"op": "cancel", "id": trial_id})
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(future), grace)
        if future.done() and future.exception() is None:
            reply = future.result()[0]
            return reply["op"] == "done" or bool(reply.get("recorded"))  # else it never started there
        await self.kill()
        return False

    def _send(self, header: dict[str, Any], body: bytes = b"") -> None:
        if self.lost is None and self.writer is not None and not self.writer.is_closing():
            self.writer.write(encode(header, body))

    async def kill(self) -> None:
        """SIGKILL the worker and wait until it is gone."""
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()

    async def close(self, wait: float = CLOSE_WAIT_SEC) -> None:
        """Close the socket (the worker cancels what still runs, stops its sandboxes, exits); kill it if it
        has not exited within `wait` seconds."""
        if self.writer is not None:
            self.writer.close()
        if self.proc is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), wait)
            except TimeoutError:
                await self.kill()
        if self._reader_task is not None:
            await asyncio.gather(self._reader_task, return_exceptions=True)


class CancelledNotRecorded(asyncio.CancelledError):
    """A cancelled trial whose worker did not record it in time (the worker was killed)."""


class ProcessExecutor(Executor):
    """Trials over worker processes on this machine; see the module docstring."""

    name = "processes"
    options_model = ProcessOptions

    @classmethod
    def check_job(cls, config: JobConfig) -> None:
        """Refuse agents whose model runs inside the process (`local:`): each worker would load a copy."""
        models = in_process_models(config)
        if models:
            raise ValueError(
                f"the processes executor cannot run in-process models ({', '.join(sorted(set(models)))}): "
                "each worker process would load its own copy; use --executor local, or serve the model "
                "(`evsys model serve`) and give its URL"
            )

    def __init__(self, ctx: ExecutorContext) -> None:
        super().__init__(ctx)
        options = self.parse_options(ctx.options)
        assert isinstance(options, ProcessOptions)  # parse_options gives this class's options_model
        self.options = options
        self.n_workers = min(options.workers or usable_cores(), max(ctx.n_concurrent, 1))
        share = math.ceil(ctx.n_concurrent / self.n_workers)
        self.hello = {
            "job_dir": str(ctx.store.job_dir),
            "reuse_sandboxes": ctx.reuse_sandboxes,
            "max_idle": share if ctx.reuse_sandboxes else 0,
            "warm": math.ceil(ctx.warm_sandboxes / self.n_workers),
        }
        self.workers: list[WorkerProcess] = []
        self.worker_losses = 0
        self.start_failures = 0
        self._starting = asyncio.create_task(self._start_workers())  # while the driver plans

    async def _start_workers(self) -> None:
        for _ in range(self.n_workers):
            worker = WorkerProcess(self.hello)
            self.workers.append(worker)
            await worker.start()

    async def execute(self, planned: PlannedTrial) -> TrialResult:
        """Run one trial on the least busy worker; again on another when its worker died."""
        spec, store = planned.spec, self.ctx.store
        if spec.failure is not None:  # decided while planning: nothing runs, the driver records it
            return await run_trial(spec, store)
        on_event = self.ctx.resources(planned).on_event

        async def attempt(current: TrialSpec) -> TrialResult:
            try:
                worker = await self._pick(current.sandbox)
            except WorkerGone as exc:
                return await record_failure(store, current, FailureCause.WORKER_LOST, str(exc))
            try:
                payload = await worker.run(current, on_event, self.options.cancel_grace_sec)
            except CancelledNotRecorded:
                await asyncio.shield(
                    record_failure(store, current, FailureCause.CANCELLED, CANCELLED_MESSAGE)
                )
                raise asyncio.CancelledError from None
            finally:
                worker.in_flight -= 1
            if isinstance(payload, bytes):
                return TrialResult.model_validate_json(payload)
            message = f"the worker process could not run this trial: {payload}"
            return await record_failure(store, current, FailureCause.SANDBOX_FAILED, message)

        return await run_rescheduled(
            store,
            spec,
            attempt,
            max_losses=self.options.max_worker_losses,
            worker="the worker process",
            on_loss=self._count_loss,
            record_cancelled=False,
        )

    def _count_loss(self) -> None:
        self.worker_losses += 1

    async def _pick(self, backend: str) -> WorkerProcess:
        """The live worker with the fewest trials placed on it (lost ones replaced first), once it is ready;
        the trial is counted on it at once, so trials placed meanwhile spread over the others."""
        await asyncio.shield(self._starting)
        for index, worker in enumerate(self.workers):
            if worker.lost is not None:
                await self._replace(index, worker, backend)
        worker = min(self.workers, key=lambda w: w.in_flight)
        worker.in_flight += 1
        try:
            await worker.ready
        except BaseException:
            worker.in_flight -= 1
            raise
        return worker

    async def _replace(self, index: int, lost: WorkerProcess, backend: str) -> None:
        """A new worker in the place of `lost` (once, however many trials notice); `WorkerGone` when workers
        keep dying before their first trial."""
        if not lost.ready.done() or lost.ready.exception() is not None:
            self.start_failures += 1
        if self.start_failures >= MAX_START_FAILURES:
            raise WorkerGone(f"worker processes fail to start ({lost.lost}); see the errors above")
        replacement = WorkerProcess(self.hello)
        self.workers[index] = replacement  # before any await: other trials see it at once
        await sandbox_class(backend).cleanup_stale()  # the sandboxes the dead worker left behind
        await replacement.start()

    async def aclose(self) -> None:
        """Cancel what still runs, then close every worker (it stops its sandboxes and exits)."""
        await super().aclose()
        self._starting.cancel()
        await asyncio.gather(self._starting, return_exceptions=True)
        await asyncio.gather(*(worker.close() for worker in self.workers), return_exceptions=True)
