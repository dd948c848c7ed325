"""Served episodes for synchronous callers: what the TRL and OpenEnv integrations drive evsys through.

Trainers call environments from plain threads (TRL's tool loop, OpenEnv's session pool); evsys runs trials
on an event loop. An `EpisodeRunner` owns one event loop in a daemon thread and, on it, the same serving
state `evsys serve` uses (evsys.engine.episodes' ServeService over a task catalog): every episode is a
trial of one job — the task's sandbox from a shared pool, the loop agent's tools, the task's verifier chain,
result.json and trajectory.json under `<jobs_dir>/<job_name>/`. An `EpisodeClient` is one caller's session:
`start` an episode of a task, call `tool`s (or send harness `message`s), `finish` it (the verifier runs, the
sandbox is released) and read its `TrialResult`; `judged()` gives its reward under the runner's integrity
policy (`integrity="zero" | "screen" | "flag"`, evsys.trajectory.integrity), which the TRL and OpenEnv
integrations hand to the trainer.

```python
runner = EpisodeRunner("examples/tasks", jobs_dir="jobs")
client = runner.open()
first = client.start("create-file")  # or its full name, "evsys/create-file"
client.tool("bash", {"command": "printf 'Hello from evsys!\\n' > /app/greeting.txt"})
print(client.finish().reward)  # 1.0
runner.close()
```
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Coroutine
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from evsys.engine.episodes.episode import EpisodeAgent, EpisodeLimits
from evsys.engine.episodes.protocol import (
    CallToolAction,
    MessageAction,
    ResetParams,
    ServedObservation,
    ServeError,
)
from evsys.engine.episodes.service import ServeService, ServeSettings, Session, build_service
from evsys.engine.sources import resolve_tasks
from evsys.records import IntegrityPolicy, Trajectory, TrialResult
from evsys.task.loader import TaskSet
from evsys.task.select import TaskNameError, resolve_task_name
from evsys.trajectory.integrity import JudgedReward, integrity_policy, judged_reward
from evsys.util.atexit_close import close_at_exit

T = TypeVar("T")
SUBMIT = "submit"
REPLY = "reply"
REPLY_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": REPLY,
        "description": "Say your message to the user you are talking with; their answer is the result.",
        "parameters": {
            "type": "object",
            "properties": {"message": {"type": "string", "description": "What you say."}},
            "required": ["message"],
        },
    },
}
"""The tool a trainer's tool loop (TRL's, OpenEnv's MCP adapter) continues a conversation with: a rollout
ends at a model turn without tool calls, so a task's respond hook hears the model through `reply`."""
BAD_REPLY = "reply takes one argument, message: the non-empty text you say"


def default_job_name(prefix: str) -> str:
    """`<prefix>-<timestamp>-<random>`: a job directory name no earlier run took."""
    return f"{prefix}-{datetime.now().strftime('%Y-%m-%d__%H-%M-%S')}-{secrets.token_hex(3)}"


class EpisodeRunner:
    """Tasks of one dataset served as episodes on a private event loop; thread-safe, blocking methods.

    `dataset` is one dataset as `evsys run` takes it (a task directory, a directory of tasks, a Python-task
    or repository-row file, `NAME@VERSION`, a `TaskSet`); a missing path is refused naming what was looked
    for. `harness` (with `model`, `base_url`) makes every episode a harness episode: the
    harness runs its own loop against `model` through evsys's recording proxy. `integrity` is what a trial
    with integrity findings is worth to the trainer (`judged()`): "zero" (the default), "screen" or "flag".
    """

    def __init__(
        self,
        dataset: Path | str | TaskSet,
        *,
        jobs_dir: Path | str = "jobs",
        job_name: str | None = None,
        sandbox: str = "local",
        max_steps: int = 30,
        step_timeout_sec: float = 60.0,
        max_output_chars: int = 10_000,
        max_sessions: int = 256,
        harness: str | None = None,
        harness_options: dict[str, Any] | None = None,
        model: str | None = None,
        base_url: str | None = None,
        integrity: IntegrityPolicy | str = IntegrityPolicy.ZERO,
    ) -> None:
        self.integrity = integrity_policy(integrity)
        limits = EpisodeLimits(max_steps, step_timeout_sec, max_output_chars)
        self.settings = ServeSettings(
            max_sessions=max_sessions,
            idle_timeout_sec=24 * 3600.0,  # a trainer may hold an episode across a long optimiser step
            limits=limits,
            harness=harness,
            harness_options=dict(harness_options or {}),
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="evsys-episodes", daemon=True)
        self._thread.start()
        self._closed = False
        name = job_name or default_job_name("episodes")
        try:
            self.service: ServeService = self.call(
                self._start(dataset, name, Path(jobs_dir), sandbox, model, base_url)
            )
        except BaseException:
            self._stop_loop()
            raise
        close_at_exit(self.close)  # a runner left open still finishes its job (result.json complete)

    async def _start(
        self,
        dataset: Path | str | TaskSet,
        name: str,
        jobs_dir: Path,
        sandbox: str,
        model: str | None,
        base_url: str | None,
    ) -> ServeService:
        source = await resolve_tasks(dataset)  # a path, a TaskSet or NAME@VERSION, as `evsys run` takes
        if len(source.paths) != 1:
            raise ValueError(
                "an episode runner serves one dataset: a task directory or a directory of them, a dataset "
                "directory or rows file, NAME@VERSION or a TaskSet (Python tasks in memory: save them first)"
            )
        service = await asyncio.to_thread(
            build_service,
            source.paths[0],
            self.settings,
            job_name=name,
            jobs_dir=jobs_dir,
            sandbox=sandbox,
            model=model,
            base_url=base_url,
        )
        await service.start()
        return service

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the runner's loop and wait for its result (from any thread but the loop's own)."""
        if self._closed:
            coro.close()
            raise RuntimeError("the episode runner is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @property
    def job_dir(self) -> Path:
        """Where every episode's trial directory (result.json, trajectory.json, logs) is written."""
        return Path(self.service.catalog.job.job_dir)

    @property
    def task_names(self) -> list[str]:
        """The dataset's tasks, in catalog order (`start(name)` picks one)."""
        return self.service.catalog.names

    def require_tasks(self, names: list[str]) -> list[str]:
        """The full names of `names`, each a task of the dataset by its full or (unambiguous) short name;
        ValueError naming the first unknown one, the closest known name and the known ones."""
        try:
            return [resolve_task_name(name, self.task_names) for name in names]
        except TaskNameError as exc:
            raise ValueError(str(exc)) from None

    def instruction(self, task: str) -> str:
        """What `task` asks the agent to do."""
        return self.service.catalog.pick(task, None).task.instruction

    def open(self, kind: str = "episodes") -> EpisodeClient:
        """A new session (at most one episode at a time)."""

        async def opened() -> Session:
            return self.service.open_session(kind)

        return EpisodeClient(self, self.call(opened()))

    def close(self) -> None:
        """End every session (their episodes are still verified and recorded), write the job's result.json,
        stop the sandboxes and the loop. Safe to call twice."""
        if self._closed:
            return
        try:
            self.call(self.service.close())
        finally:
            self._closed = True
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)


class EpisodeClient:
    """One session of an `EpisodeRunner`: one episode at a time, driven by blocking calls."""

    def __init__(self, runner: EpisodeRunner, session: Session) -> None:
        self.runner = runner
        self.session = session
        self.result: TrialResult | None = None

    def start(
        self,
        task: str | None = None,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        max_steps: int | None = None,
    ) -> ServedObservation:
        """End the current episode (if any) and start one of `task` (by name, else by `seed`): its sandbox is
        up when this returns; the observation carries the instruction."""
        self.result = None
        params = ResetParams(task=task, seed=seed, episode_id=episode_id)
        return self.runner.call(self.session.reset(params, max_steps=max_steps))

    @property
    def running(self) -> bool:
        """True while the current episode takes steps."""
        episode = self.session.episode
        return episode is not None and episode.runner is not None and not episode.done

    def tool(self, name: str, arguments: dict[str, Any]) -> tuple[ServedObservation, float | None, bool]:
        """Run one tool call in the episode's sandbox: (observation, reward, done); the final step (submit,
        step limit) carries the verifier's reward."""
        action = CallToolAction(tool_name=name, arguments=arguments)
        return self.runner.call(self.session.step(action))

    def message(self, text: str) -> tuple[ServedObservation, float | None, bool]:
        """One conversational turn: a harness episode's user message, or the model's turn a task's respond
        hook answers (the observation's `text`)."""
        return self.runner.call(self.session.step(MessageAction(message=text)))

    @property
    def answers_turns(self) -> bool:
        """True when the current episode's task answers the model's turns with a respond hook."""
        episode = self.session.episode
        return episode is not None and episode.agent.takes_messages and self.runner.settings.harness is None

    def tool_schemas(self, reply: bool = True) -> list[dict[str, Any]]:
        """The current episode's tools (OpenAI shape, the task's own choice), then `reply` (REPLY_SCHEMA)
        when its task answers the model's turns with a respond hook (unless `reply` is False: a caller
        that hands the model's turns without tool calls to `message` itself)."""
        talks = reply and self.answers_turns
        return [*self.session.tool_schemas(), *([REPLY_SCHEMA] if talks else [])]

    def reply(self, arguments: dict[str, Any]) -> tuple[ServedObservation, float | None, bool]:
        """A call of `reply` with the model's arguments: its message to the respond hook (ValueError naming
        what `reply` takes when the arguments are not one non-empty `message`)."""
        message = arguments.get("message")
        if set(arguments) != {"message"} or not isinstance(message, str) or not message.strip():
            raise ValueError(BAD_REPLY)
        return self.message(message)

    def finish(self) -> TrialResult:
        """End the episode with `submit` (unless it has ended already; a task that does not offer `submit`
        ends as after the model's last turn), wait for its verifier chain and return the trial's result
        (reward, per-key rewards, failure)."""
        if self.result is not None:
            return self.result
        episode = self.session.episode
        if episode is None:
            raise RuntimeError("no episode: call start() first")
        if self.running and SUBMIT not in episode.tool_names:
            self.runner.call(_finish_run(episode.agent))  # a task without submit: the client ends it
        elif self.running:
            try:
                self.tool(SUBMIT, {})
            except ServeError:  # it ended between the check and the call: its result is on the way
                pass
        self.runner.call(episode.wait())
        assert episode.runner is not None
        self.result = self.runner.call(_result(episode.runner))
        return self.result

    def judged(self) -> JudgedReward:
        """The finished episode's reward under the runner's integrity policy: `baseline_reward` is None for a
        trial without a reward (it failed before its verifier scored it) or a screened one (the trainer
        leaves it out of the group's baseline), 0 for a failure the agent caused itself or a zeroed trial."""
        return judged_reward(self.finish(), self.runner.integrity)

    def trajectory(self) -> Trajectory:
        """The finished episode's recorded trajectory (its turns with token ids and logprobs)."""
        result = self.finish()
        trajectory = self.runner.service.store.trajectory(result.trial_name)
        if trajectory is None:
            raise RuntimeError(f"{result.trial_name}: no trajectory was recorded")
        return trajectory

    def close(self) -> None:
        """Close the session: a running episode ends (still verified and recorded), its sandbox is freed."""

        async def closed() -> None:
            episode = self.session.episode
            self.session.close("the session was closed")
            if episode is not None:
                await episode.wait()

        self.runner.call(closed())


async def _finish_run(agent: EpisodeAgent) -> None:
    agent.finish()


async def _result(runner: asyncio.Task[TrialResult]) -> TrialResult:
    return await runner
