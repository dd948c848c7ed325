"""`Job`: plan attempts x tasks x agents, run them with bounded concurrency, retry, resume, cancel, summarise.

```python
job = evsys.Job(JobConfig(datasets=["examples/tasks"], agents=[AgentSpec(name="oracle")]), on_trial_done=cb)
result = await job.run()
```
`-n` (`n_concurrent`) bounds whole trials. Retries (off by default) use exponential backoff with jitter and
only for sandbox_failed, model_error, agent_error and worker_lost. `Job.resume(job_dir)` reruns every trial
without a valid result.json (or whose result is `cancelled`). `job.cancel()` (the CLI calls it on Ctrl-C)
stops running trials, records them as `cancelled`, tears their sandboxes down and writes the job's
result.json; the job stays resumable.

Python tasks run too: a dataset path with a `dataset.toml`, or `python_tasks=` handed over in memory (what
`run_rollouts` does); they run through the same `Trial` (evsys.engine.trial).

Where trials run is the executor's business (evsys.engine.executors; `JobConfig.executor`, the local one by
default, saved in config.json so a resume runs where the job ran): the job plans `TrialSpec`s, submits them,
retries the retryable failures and owns the job directory. The job also owns what its trials share in this
process: the sandbox pool, the model clients and the image services (`job.images`,
evsys.engine.image_services), whose build progress goes out on the job's event stream
(`job.events.subscribe(callback)`: `BuildProgress` events, evsys.engine.events; `evsys run`'s progress
display shows the builds running from them).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evsys.agent.registry import resolve_agent, talks_to_model
from evsys.engine.activity import TrialActivity
from evsys.engine.config import RESUME_SAFE_FIELDS, AgentSpec, JobConfig
from evsys.engine.events import JobEvents
from evsys.engine.executors.base import Executor, ExecutorContext, create_executor, executor_class
from evsys.engine.image_services import ImageServices
from evsys.engine.metrics import job_result, progress_counts
from evsys.engine.plan import PythonTaskItem, plan_trials
from evsys.engine.retries import is_retryable, retry_delay
from evsys.engine.run import TrialResources
from evsys.engine.spec import PlannedTrial
from evsys.engine.store import JobStore, JobStoreError
from evsys.model.base import ModelClient, close_model_client
from evsys.records import FailureCause, JobResult, TrialFailure, TrialResult, utc_now
from evsys.sandbox.pool import SandboxPool
from evsys.sandbox.registry import sandbox_class
from evsys.task.loader import TaskSet

TrialCallback = Callable[[TrialResult], Awaitable[None] | None]
ModelClientFactory = Callable[[AgentSpec], ModelClient | None]
JOB_RESULT_INTERVAL_SEC = 0.5
# result.json holds every finished trial: with thousands, building and writing it takes tens of ms, so the
# rewrites are spaced to keep them under this share of the time (and at most JOB_RESULT_MAX_PAUSE_SEC apart)
JOB_RESULT_LOOP_SHARE = 0.05
JOB_RESULT_MAX_PAUSE_SEC = 10.0


def default_model_client(agent: AgentSpec) -> ModelClient | None:
    """The model client for `agent.model` (a `provider:model` string), via evsys.model."""
    from evsys.model.spec import create_model_client

    if agent.model is None:
        raise ValueError(f"agent '{agent.name}' has no model")
    return create_model_client(agent.model, base_url=agent.base_url)


class Job:
    """A planned set of trials and the machinery to run them. See the module docstring."""

    def __init__(
        self,
        config: JobConfig,
        on_trial_done: TrialCallback | None = None,
        *,
        resume: bool = False,
        retry_errors: bool = False,
        model_client_factory: ModelClientFactory | None = None,
        python_tasks: Sequence[PythonTaskItem] | None = None,
        on_agent_event: Callable[[dict[str, Any]], None] | None = None,
        tasksets: Mapping[Path, TaskSet] | None = None,
        keep_trajectories: bool = False,
        sandboxes: SandboxPool | None = None,
        by_task: bool = False,
    ) -> None:
        datasets = [Path(p).absolute() for p in config.datasets]  # a resume may start from another directory
        self.config = config.model_copy(update={"datasets": datasets})
        self.on_trial_done = on_trial_done
        self.on_agent_event = on_agent_event  # live agent events, e.g. harness events (`evsys run --stream`)
        self.events = JobEvents()  # the job's event stream (build progress), see evsys.engine.events
        # the image services every trial of the job shares; their build progress goes on the event stream
        self.images = ImageServices(on_progress=self.events.emit)
        self.activity: dict[str, TrialActivity] = {}  # per running trial, what it does now
        self.resume_mode = resume
        self.retry_errors = retry_errors
        self.model_client_factory = model_client_factory
        self.python_tasks = list(python_tasks) if python_tasks is not None else None
        self.tasksets = dict(tasksets or {})  # task directories pre-flight loaded already, by resolved path
        # keep_trajectories: every trial's trajectory stays in memory too (`store.trajectory(name)`)
        self.store = JobStore(config.job_dir, keep_trajectories=keep_trajectories)
        self.planned: list[PlannedTrial] = []
        self.results: dict[str, TrialResult] = {}
        self.running: set[str] = set()
        self._unstarted = 0  # trials of this run not started yet (set when they are scheduled)
        self.prepared = False  # True once planned and the job directory is ready: trials may start
        self._clients: dict[int, ModelClient | None] = {}
        self._workers: list[asyncio.Task[None]] = []
        self._executor: Executor | None = None
        self._cancelled = False
        self._started_at = utc_now()
        self._dirty = False
        self._writer: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._pool: SandboxPool | None = None
        # a pool the caller owns and keeps across jobs (a trainer's steps): used, never closed here
        self._lent_pool = sandboxes
        # by_task: trials start task by task (every attempt of a task, then the next task) instead of attempt
        # by attempt, so a task's group of samples finishes early (streaming rollouts)
        self.by_task = by_task

    @classmethod
    def resume(
        cls,
        job_dir: Path | str,
        on_trial_done: TrialCallback | None = None,
        *,
        changes: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Job:
        """A Job rebuilt from `<job_dir>/config.json`, in resume mode: it runs on the recorded executor (the
        local one for a config.json that records none). `changes` may set the fields in RESUME_SAFE_FIELDS
        (concurrency, retries, timeout multipliers, sandbox reuse, the executor); any other field is a
        `JobStoreError` naming it. The changed config is saved when the job starts."""
        store = JobStore(Path(job_dir))
        config = store.read_config()
        refused = sorted(set(changes or {}) - set(RESUME_SAFE_FIELDS))
        if refused:
            raise JobStoreError(
                f"{', '.join(refused)} cannot change when resuming {job_dir} (its config.json fixes them); "
                f"a resume may change only {', '.join(RESUME_SAFE_FIELDS)}"
            )
        where = {"jobs_dir": Path(job_dir).parent, "job_name": Path(job_dir).name}
        config = JobConfig.model_validate({**dict(config), **(changes or {}), **where})
        return cls(config, on_trial_done, resume=True, **kwargs)

    @property
    def executor(self) -> Executor | None:
        """The executor running the trials (None before `run()` started it)."""
        return self._executor

    @property
    def job_dir(self) -> Path:
        """The job directory."""
        return self.config.job_dir

    def status(self) -> dict[str, Any]:
        """Live counts for progress displays: planned, done, running, errored, cancelled, mean reward so far
        (overall and per agent), and whether the job is past its preparation (plan, job directory)."""
        done = list(self.results.values())
        rewards = [r.reward or 0.0 for r in done if r.cause != FailureCause.CANCELLED]
        return {
            "planned": len(self.planned),
            "running": len(self.running),
            "mean_reward": sum(rewards) / len(rewards) if rewards else None,
            "prepared": self.prepared,
            "activity": {name: now.text() for name, now in self.activity.items() if name in self.running},
            **progress_counts(done),
        }

    @property
    def cancelled(self) -> bool:
        """True once `cancel()` was called."""
        return self._cancelled

    def cancel(self) -> None:
        """Cancel the job: running trials are recorded as `cancelled`, queued ones are left for a resume."""
        self._cancelled = True
        for worker in self._workers:
            worker.cancel()

    async def run(self) -> JobResult:
        """Run every trial not already finished; return the JobResult (also written to result.json)."""
        executor_class(self.config.executor.name).check_job(self.config)
        self._check_lent_pool()
        try:
            # made first: an executor with worker processes starts them while the job is planned
            self._executor = create_executor(self.config.executor.name, self._executor_context())
            await self._prepare()
            self.prepared = True
            self._pool = self._lent_pool or self._own_pool()
            return await self._run_planned_trials()
        finally:
            if self._executor is not None:
                await asyncio.shield(self._executor.aclose())
            if self._pool is not None and self._pool is not self._lent_pool:
                await asyncio.shield(self._pool.close())
            await self._close_clients()

    def _own_pool(self) -> SandboxPool:
        """The job's own pool: reset sandboxes kept for trials not started yet, `warm_sandboxes` ready."""
        max_idle = self.config.n_concurrent if self.config.reuse_sandboxes else 0
        return SandboxPool.for_backend(
            self.config.sandbox,
            max_idle=max_idle,
            warm=self.config.warm_sandboxes,
            demand=lambda: self._unstarted,
        )

    def _check_lent_pool(self) -> None:
        """A lent pool serves trials in this process only, on the job's own sandbox backend, a whole sandbox
        per lease (a task's verifier owns /tests and /logs, which trials sharing a sandbox would share)."""
        lent = self._lent_pool
        if lent is None:
            return
        if not executor_class(self.config.executor.name).in_process:
            raise ValueError(
                f"a sandbox pool passed to the job serves trials in this process only; executor "
                f"{self.config.executor.name!r} runs them in other processes"
            )
        if lent.backend != self.config.sandbox:
            raise ValueError(
                f"the sandbox pool passed to the job starts {lent.backend!r} sandboxes; "
                f"the job runs on {self.config.sandbox!r}"
            )
        if lent.shares:
            raise ValueError("the sandbox pool passed to the job shares sandboxes; trials need whole ones")

    def _executor_context(self) -> ExecutorContext:
        def resources(planned: PlannedTrial) -> TrialResources:
            return TrialResources(
                pool=self._pool,
                model_client=self._clients.get(id(planned.config.agent)),
                on_event=self._on_event,
                task=planned.task,
                images=self.images,
            )

        return ExecutorContext(
            store=self.store,
            n_concurrent=self.config.n_concurrent,
            resources=resources,
            on_start=self._trial_started,
            reuse_sandboxes=self.config.reuse_sandboxes,
            warm_sandboxes=self.config.warm_sandboxes,
            options=self.config.executor.options,  # validated once, with the config
        )

    def _on_event(self, event: dict[str, Any]) -> None:
        """A trial's live event: what the trial does now is kept for `status()`, and the event goes on to
        `on_agent_event` (`evsys run --stream`)."""
        trial = event.get("trial")
        if trial in self.running:
            self.activity.setdefault(trial, TrialActivity()).update(event)
        if self.on_agent_event is not None:
            self.on_agent_event(event)

    def _trial_started(self, trial_name: str) -> None:
        self.running.add(trial_name)
        self._unstarted -= 1

    async def _run_planned_trials(self) -> JobResult:
        self._schedule_job_result()
        pending = [p for p in self.planned if p.config.trial_name not in self.results]
        if self.by_task:  # stable: attempts stay in order within a task
            first = {name: i for i, name in reversed(list(enumerate(p.config.task_name for p in pending)))}
            pending.sort(key=lambda p: first[p.config.task_name])
        self._unstarted = len(pending)  # trials that may still take a sandbox another trial released
        self._workers = [asyncio.create_task(self._run_planned(p)) for p in pending]
        try:
            if self._workers:
                await asyncio.wait(self._workers)
        except asyncio.CancelledError:  # the caller cancelled job.run() itself
            self.cancel()
            await asyncio.gather(*self._workers, return_exceptions=True)
            await self._write_job_result()
            raise
        result = await self._write_job_result()
        for worker in self._workers:
            failed = None if worker.cancelled() else worker.exception()
            if failed is not None:
                raise failed
        return result

    async def _prepare(self) -> None:
        for agent in self.config.agents:
            resolve_agent(agent.name, agent.kwargs)  # fail fast on unknown agents / bad kwargs
        await sandbox_class(self.config.sandbox).cleanup_stale()  # what killed earlier runs left behind
        self.planned = await asyncio.to_thread(plan_trials, self.config, self.python_tasks, self.tasksets)
        for agent in self.config.agents:  # before the job directory exists: a bad model leaves none
            self._clients[id(agent)] = await self._model_client(agent)
        if self.store.exists():
            if not self.resume_mode:
                raise JobStoreError(
                    f"{self.job_dir} already exists: resume it with `evsys run --resume {self.job_dir}` "
                    "or choose another --job-name"
                )
            if self.store.check_resumable(self.config):
                await self.store.write_config(self.config)
            names = [p.config.trial_name for p in self.planned]
            self.results = await asyncio.to_thread(
                self.store.finished_results, names, retry_errors=self.retry_errors
            )
            await asyncio.to_thread(self.store.remove_stale_temp_files, list(self.results))
            recorded = await asyncio.to_thread(self.store.recorded_start, self.results)
            self._started_at = recorded or self._started_at  # a resume keeps the job's own start
        else:
            await self.store.write_config(self.config)

    async def _model_client(self, agent: AgentSpec) -> ModelClient | None:
        """One client per agent spec that talks to a model (`Agent.model_use`), built off the event loop."""
        if not talks_to_model(agent.name, agent.model):
            return None
        factory = self.model_client_factory or default_model_client
        try:
            return await asyncio.to_thread(factory, agent)
        except ValueError as exc:
            raise ValueError(f"agent '{agent.name}': model '{agent.model}': {exc}") from exc

    async def _close_clients(self) -> None:
        clients, self._clients = [c for c in self._clients.values() if c is not None], {}
        for client in clients:
            await close_model_client(client)

    async def _run_planned(self, planned: PlannedTrial) -> None:
        """Submit one trial to the executor, again after each retryable failure; record the last result."""
        assert self._executor is not None
        name = planned.config.trial_name
        failures: list[TrialFailure] = []
        try:
            while True:
                spec = planned.spec.model_copy(update={"retries": list(failures)})
                try:
                    result = await self._executor.submit(PlannedTrial(spec=spec, task=planned.task))
                except asyncio.CancelledError:
                    await self._record_cancelled(name)
                    raise
                failure = result.failure
                if failure is None or not self._should_retry(result, len(failures)):
                    break
                failures.append(failure)
                delay = retry_delay(
                    len(failures) - 1, self.config.retry_min_wait_sec, self.config.retry_max_wait_sec
                )
                try:
                    await asyncio.sleep(delay)
                except asyncio.CancelledError:
                    await self._record(result)
                    raise
        finally:
            self.running.discard(name)
        await self._record(result)

    async def _record_cancelled(self, name: str) -> None:
        """A trial cancelled while it ran recorded `cancelled` in its result.json; one still queued did not
        start and is left for a resume."""
        if name not in self.running:
            return
        result = await asyncio.to_thread(self.store.read_trial_result, name)
        if result is not None:
            await self._record(result)

    def _should_retry(self, result: TrialResult, n_retries: int) -> bool:
        return (
            not self._cancelled
            and n_retries < self.config.max_retries
            and result.failure is not None
            and is_retryable(result.cause)
        )

    async def _record(self, result: TrialResult) -> None:
        self.results[result.trial_name] = result
        self.activity.pop(result.trial_name, None)
        if self.on_trial_done is not None:
            try:
                outcome = self.on_trial_done(result)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception as exc:  # a broken callback must not kill the job
                result.warnings.append(f"on_trial_done failed: {exc!r}")
        self._schedule_job_result()

    def job_result(self) -> JobResult:
        """The JobResult for the trials finished so far."""
        trials = [
            self.results[p.config.trial_name] for p in self.planned if p.config.trial_name in self.results
        ]
        return job_result(
            trials,
            job_name=self.config.job_name,
            job_dir=str(self.job_dir),
            started_at=self._started_at,
            n_planned=len(self.planned),
            n_attempts=self.config.n_attempts,
        )

    def _schedule_job_result(self) -> None:
        """Have result.json rewritten soon (at most one write per JOB_RESULT_INTERVAL_SEC)."""
        self._dirty = True
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._job_result_writer())

    async def _job_result_writer(self) -> None:
        while self._dirty and not self._closing.is_set():
            self._dirty = False
            started = time.perf_counter()
            await asyncio.shield(self.store.write_job_result(self.job_result()))
            spent = time.perf_counter() - started
            pause = min(max(JOB_RESULT_INTERVAL_SEC, spent / JOB_RESULT_LOOP_SHARE), JOB_RESULT_MAX_PAUSE_SEC)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), pause)

    async def _write_job_result(self) -> JobResult:
        """Write the final result.json (after any pending periodic write has finished)."""
        self._closing.set()
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)
        result = self.job_result()
        result.finished_at = utc_now()
        await asyncio.shield(self.store.write_job_result(result))
        return result
