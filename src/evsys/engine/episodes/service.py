"""The serving state behind every transport: sessions (capped, reaped when idle), their episodes, the job.

A `Session` holds at most one episode at a time and serialises its requests (one lock), so every request is
answered exactly once, in order. Sessions are identified by an unguessable token that only their own
transport knows (a WebSocket keeps it to itself; an MCP client gets it as `Mcp-Session-Id`), so no client can
reset, step or read another one. A session idle for `idle_timeout_sec` — a half-open socket, a client that
went away without closing — is closed by the reaper: its episode is ended (and still recorded) and its
sandbox released.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from evsys.agent.tools import SandboxTools
from evsys.engine.episodes.catalog import EPISODE_NUMBER, ServedTask, TaskCatalog
from evsys.engine.episodes.episode import Episode, EpisodeAgent, EpisodeLimits, EventSink
from evsys.engine.episodes.protocol import (
    CallToolAction,
    ErrorCode,
    MessageAction,
    ResetParams,
    ServedObservation,
    ServedState,
    ServeError,
)
from evsys.engine.image_services import ImageServices
from evsys.engine.metrics import compute_metrics, with_findings
from evsys.engine.store import JobStore
from evsys.model.base import ModelClient, close_model_client
from evsys.records import JobResult, TrialResult, utc_now
from evsys.sandbox.pool import SandboxPool

log = logging.getLogger(__name__)
JOB_RESULT_INTERVAL_SEC = 2.0


@dataclass
class ServeSettings:
    """How the server bounds its clients."""

    max_sessions: int = 64
    idle_timeout_sec: float = 300.0
    limits: EpisodeLimits = field(default_factory=EpisodeLimits)
    max_message_bytes: int = 1024 * 1024
    harness: str | None = None  # harness mode: a catalog harness or a `module:Class` harness agent
    harness_options: dict[str, Any] = field(default_factory=dict)
    warm_sandboxes: int = 0  # started sandboxes per task environment kept ready (evsys.sandbox.pool.warm)


class Session:
    """One client's session: its current episode, a lock serialising its requests, its last activity."""

    def __init__(self, service: ServeService, kind: str) -> None:
        self.id = secrets.token_urlsafe(24)
        # the group of the session's episodes when reset names none (not the id: that one stays secret)
        self.group = f"session-{secrets.token_hex(6)}"
        self.kind = kind
        self.service = service
        self.episode: Episode[EpisodeAgent] | None = None
        self.lock = asyncio.Lock()
        self.last_active = time.monotonic()
        self.closed = False
        self.on_reap: Callable[[], Any] | None = None  # how the transport drops its connection

    def touch(self) -> None:
        """Mark the session active now (the reaper measures idleness from here)."""
        self.last_active = time.monotonic()

    async def reset(self, params: ResetParams, *, max_steps: int | None = None) -> ServedObservation:
        """End the current episode (if any) and start a new one of the chosen task (`max_steps` overrides
        the server's step limit)."""
        task = self.service.catalog.pick(params.task, params.seed)
        previous = self.episode
        self._end_episode("the client reset the session")
        if previous is not None:  # one sandbox per session: the left episode is verified and released first
            await previous.wait()
        group = params.group_id or self.group
        self.episode = self.service.new_episode(task, params.episode_id, max_steps, group=group)
        try:
            return await self.episode.start()
        except BaseException:
            self.episode.leave("the episode could not start")
            raise

    async def step(
        self, action: CallToolAction | MessageAction, sink: EventSink | None = None
    ) -> tuple[ServedObservation, float | None, bool]:
        """One action in the current episode (`sink` receives a harness turn's events as they happen)."""
        if self.episode is None:
            raise ServeError(ErrorCode.NO_EPISODE, "no episode: send reset first")
        return await self.episode.step(action, sink)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools the current episode offers (OpenAI shape): the built-in ones, then the task's MCP tools;
        the built-in ones before the first reset."""
        if self.episode is None:
            return SandboxTools.schemas()
        return list(self.episode.agent.tool_schemas)

    def state(self) -> ServedState:
        """The current episode's state (an empty state before the first reset)."""
        return self.episode.state() if self.episode is not None else ServedState()

    def _end_episode(self, reason: str) -> None:
        if self.episode is not None and not self.episode.done:
            self.episode.leave(reason)
        self.episode = None

    def close(self, reason: str) -> None:
        """Free the session: its episode ends (recorded in the background), its slot is released."""
        if self.closed:
            return
        self.closed = True
        self._end_episode(reason)
        self.service.sessions.pop(self.id, None)


class ServeService:
    """Sessions, the task catalog, the sandbox pool and the job directory served episodes are written to."""

    def __init__(self, catalog: TaskCatalog, settings: ServeSettings, *, pool: SandboxPool | None = None):
        self.catalog = catalog
        self.settings = settings
        self.store = JobStore(catalog.job.job_dir)
        self.pool = pool or SandboxPool.for_backend(
            catalog.job.sandbox, max_idle=settings.max_sessions, warm=settings.warm_sandboxes
        )
        self.sessions: dict[str, Session] = {}
        self.episodes: set[Episode[EpisodeAgent]] = set()
        self.results: list[TrialResult] = []
        self._started_at = utc_now()
        self._t0 = time.perf_counter()
        # result.json writes in order, none after the final one: a periodic write cancelled mid-way goes on
        # (shielded) and must not land over the final result
        self._result_lock = asyncio.Lock()
        self._final_written = False
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.model_client: ModelClient | None = None
        self.images = ImageServices()  # shared by the episodes' trials

    async def start(self) -> None:
        """Write the job's config, build the harness's model client, start reaper and writer. A job directory
        served before keeps its episodes: new ones are numbered after them and result.json counts them all."""
        await asyncio.to_thread(self._adopt_earlier_episodes)
        await self.store.write_config(self.catalog.job)
        agent = self.catalog.job.agents[0]
        if self.settings.harness is not None and agent.model is not None:
            from evsys.model.spec import create_model_client

            self.model_client = await asyncio.to_thread(
                create_model_client, agent.model, base_url=agent.base_url
            )
        self._tasks = [asyncio.create_task(self._reaper()), asyncio.create_task(self._result_writer())]

    def _adopt_earlier_episodes(self) -> None:
        job_dir = self.catalog.job.job_dir
        numbers: dict[str, int] = {}
        for path in job_dir.iterdir() if job_dir.is_dir() else []:
            match = EPISODE_NUMBER.search(path.name)
            if match and path.is_dir():
                numbers[path.name] = int(match.group(1))
        if not numbers:
            return
        self.catalog.continue_after(max(numbers.values()))
        for name in sorted(numbers, key=numbers.__getitem__):
            result = self.store.read_trial_result(name)
            if result is not None:
                self.results.append(result)

    async def close(self) -> None:
        """Close every session, wait for their episodes to be recorded, write result.json, stop sandboxes."""
        for session in list(self.sessions.values()):
            session.close("the server shut down")
        pending = [e.wait() for e in list(self.episodes)]
        if pending:
            await asyncio.gather(*pending)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._write_job_result(final=True)
        await self.pool.close()
        await close_model_client(self.model_client)

    def open_session(self, kind: str) -> Session:
        """A new session, or `CAPACITY_REACHED` when `max_sessions` are open — counting the episodes of closed
        sessions that are still being verified, so reconnecting in a loop cannot pile up sandboxes."""
        finishing = self.finishing_episodes
        if len(self.sessions) + finishing >= self.settings.max_sessions:
            raise ServeError(
                ErrorCode.CAPACITY_REACHED,
                f"the server is at its limit of {self.settings.max_sessions} sessions "
                f"({len(self.sessions)} open, {finishing} ended and being verified); retry later",
                active_sessions=len(self.sessions),
                max_sessions=self.settings.max_sessions,
            )
        session = Session(self, kind)
        self.sessions[session.id] = session
        return session

    @property
    def finishing_episodes(self) -> int:
        """Episodes their client left that are still being verified and recorded (each holds a sandbox)."""
        return sum(1 for episode in self.episodes if episode.left_early)

    def new_episode(
        self,
        task: ServedTask,
        episode_id: str | None,
        max_steps: int | None = None,
        *,
        group: str | None = None,
    ) -> Episode[EpisodeAgent]:
        """An episode of `task` in `group` (exports compare its reward only with its group's), tracked until
        its trial is recorded."""
        spec = self.catalog.episode_spec(task, group)
        limits = self.settings.limits
        if max_steps is not None:
            limits = replace(limits, max_steps=max_steps)
        kind: type[Episode[EpisodeAgent]] = Episode
        agent: EpisodeAgent | None = None
        if self.settings.harness is not None:
            from evsys.engine.episodes.harness import HarnessEpisode, ServedHarnessAgent, resolve_harness

            harness = resolve_harness(self.settings.harness, self.settings.harness_options)
            kind, agent = HarnessEpisode, ServedHarnessAgent(harness, limits)
        episode = kind.create(
            task,
            spec,
            store=self.store,
            pool=self.pool,
            limits=limits,
            episode_id=episode_id,
            agent=agent,
            model_client=self.model_client,
            images=self.images,
        )
        self.episodes.add(episode)
        episode.on_finish = self._finished
        return episode

    def _finished(self, episode: Episode[EpisodeAgent], task: asyncio.Task[TrialResult]) -> None:
        self.episodes.discard(episode)
        if task.cancelled() or task.exception() is not None:
            return
        self.results.append(task.result())
        self._dirty.set()

    def health(self) -> dict[str, Any]:
        """`/health`: status plus session and episode counts."""
        return {
            "status": "healthy",
            "active_sessions": len(self.sessions),
            "max_sessions": self.settings.max_sessions,
            "running_episodes": len(self.episodes),
            "finishing_episodes": self.finishing_episodes,
            "recorded_episodes": len(self.results),
            "idle_sandboxes": self.pool.idle_count,
        }

    async def _reaper(self) -> None:
        interval = max(0.2, min(5.0, self.settings.idle_timeout_sec / 4))
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for session in list(self.sessions.values()):
                if session.lock.locked() or now - session.last_active < self.settings.idle_timeout_sec:
                    continue
                log.info("closing session idle for %.0f s", now - session.last_active)
                session.close(f"the session was idle for {self.settings.idle_timeout_sec:g} s")
                if session.on_reap is not None:
                    with contextlib.suppress(Exception):
                        await session.on_reap()

    async def _result_writer(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await self._write_job_result(final=False)
            await asyncio.sleep(JOB_RESULT_INTERVAL_SEC)

    async def _write_job_result(self, *, final: bool) -> None:
        trials = list(self.results)
        rewards = [t.reward or 0.0 for t in trials]
        result = JobResult(
            job_name=self.catalog.job.job_name,
            job_dir=str(self.catalog.job.job_dir),
            started_at=self._started_at,
            complete=final,
            n_planned=len(trials),
            n_done=len(trials),
            n_errors=sum(1 for t in trials if t.failure is not None),
            n_cancelled=0,
            n_with_findings=with_findings(trials),
            mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
            wall_time_sec=time.perf_counter() - self._t0,
            metrics=compute_metrics(trials, 1),
            trials=trials,
        )
        if final:
            result.finished_at = utc_now()
        try:
            await asyncio.shield(self._write_result(result))
        except OSError as exc:
            log.warning("writing the job's result.json failed: %s", exc)

    async def _write_result(self, result: JobResult) -> None:
        async with self._result_lock:
            if not self._final_written:
                await self.store.write_job_result(result)
                self._final_written = result.complete


def build_service(
    dataset: Path,
    settings: ServeSettings,
    *,
    job_name: str,
    jobs_dir: Path,
    sandbox: str = "local",
    model: str | None = None,
    base_url: str | None = None,
) -> ServeService:
    """The service over `dataset`'s tasks, recording into `jobs_dir/job_name`."""
    job = TaskCatalog.job_config(
        dataset,
        job_name=job_name,
        jobs_dir=jobs_dir,
        sandbox=sandbox,
        harness=settings.harness,
        model=model,
        base_url=base_url,
    )
    return ServeService(TaskCatalog.load(dataset, job), settings)
