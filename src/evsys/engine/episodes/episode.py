"""An episode: one trial of a task whose agent is the remote client, driven one step at a time.

The episode is a `Trial` (evsys.engine.trial) whose agent is handed in, so it runs the trial's own phases:
the sandbox comes from the server's pool (started, or reset after an earlier episode), the agent phase is a
`ServedAgent` that executes each client action with the loop agent's tools (evsys.agent.tools) and records
it in the trajectory, and when the client calls `submit` (or the step limit is reached, or the task's agent
timeout passes) the trial goes on to its verifier chain, copies /logs out, releases the sandbox and writes
result.json and trajectory.json through the server's JobStore — a served episode is a trial of the serving
job like any other.

An episode the client leaves (reset, close, disconnect, idle timeout) is still verified and recorded, in the
background; its step count and the reason are in the trial's agent metadata.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from evsys.agent.harness.events import HarnessEvent
from evsys.agent.tools import ToolOutcome
from evsys.engine.episodes.agents import (
    EpisodeAgent,
    EpisodeLeft,
    EpisodeLimits,
    ServedAgent,
    _Request,
)
from evsys.engine.episodes.catalog import ServedTask
from evsys.engine.episodes.protocol import (
    CallToolAction,
    ErrorCode,
    MessageAction,
    ServedObservation,
    ServedState,
    ServeError,
    ToolError,
)
from evsys.engine.image_services import ImageServices
from evsys.engine.spec import TrialSpec
from evsys.engine.store import JobStore
from evsys.engine.trial import Trial
from evsys.model.base import ModelClient
from evsys.records import TrialResult
from evsys.sandbox.pool import SandboxPool

__all__ = ["Episode", "EpisodeAgent", "EpisodeLeft", "EpisodeLimits", "EventSink", "ServedAgent"]

T = TypeVar("T")
STEP_GRACE_SEC = 10.0  # beyond the step timeout, before an unanswered tool call ends the episode
AgentT = TypeVar("AgentT", bound=EpisodeAgent, covariant=True)
EventSink = Callable[[HarnessEvent], Awaitable[None]]
"""Where a harness turn's events go as they happen (a streaming client's connection)."""


class Episode(Generic[AgentT]):
    """One running episode: `start`, then `step` until `done`; `leave` ends it early (still recorded)."""

    def __init__(
        self,
        task: ServedTask,
        trial: Trial,
        agent: AgentT,
        episode_id: str,
        limits: EpisodeLimits,
    ) -> None:
        self.task = task
        self.trial = trial
        self.agent = agent
        self.episode_id = episode_id
        self.limits = limits
        self.runner: asyncio.Task[TrialResult] | None = None
        self.result: TrialResult | None = None
        self.step_count = 0
        self.left_early = False  # the client left before the episode ended
        self.on_finish: Callable[[Episode[EpisodeAgent], asyncio.Task[TrialResult]], None] | None = None

    @classmethod
    def create(
        cls: type[Episode[EpisodeAgent]],
        task: ServedTask,
        spec: TrialSpec,
        *,
        store: JobStore,
        pool: SandboxPool,
        limits: EpisodeLimits,
        episode_id: str | None = None,
        agent: EpisodeAgent | None = None,
        model_client: ModelClient | None = None,
        images: ImageServices | None = None,
    ) -> Episode[EpisodeAgent]:
        """An episode of `task` (not started yet) recording into `store`; its agent phase is `agent` (default:
        a `ServedAgent` running tool actions)."""
        agent = agent or ServedAgent(limits)
        # the trial's agent phase is this agent, always in a sandbox (the client's actions run there)
        trial = Trial(
            spec, store, task=task.task, pool=pool, agent=agent, model_client=model_client, images=images
        )
        return cls(task, trial, agent, episode_id or spec.trial_name, limits)

    @property
    def done(self) -> bool:
        """True once the trial has finished (submitted, step limit, timeout, failure or left)."""
        return self.runner is not None and self.runner.done()

    async def start(self) -> ServedObservation:
        """Run the trial up to the agent phase: the sandbox is up and the tools are ready."""
        self.runner = asyncio.create_task(self.trial.run())
        on_finish = self.on_finish
        if on_finish is not None:
            self.runner.add_done_callback(lambda task: on_finish(self, task))
        started: set[asyncio.Future[Any]] = {self.agent.ready, self.runner}
        await asyncio.wait(started, return_when=asyncio.FIRST_COMPLETED)
        if not self.agent.ready.done():
            result = await self.runner
            failure = result.failure.message if result.failure else "the trial ended before its agent phase"
            raise ServeError(ErrorCode.SESSION_ERROR, f"the episode could not start: {failure}")
        instruction = self.agent.instruction or self.task.task.instruction
        return ServedObservation(
            task=self.task.name, instruction=instruction, metadata=self._start_metadata()
        )

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools the episode offers (the built-in ones, then the task's MCP tools)."""
        return [schema["function"]["name"] for schema in self.agent.tool_schemas]

    def _start_metadata(self) -> dict[str, Any]:
        metadata = {
            "episode_id": self.episode_id,
            "trial_name": self.trial.config.trial_name,
            "group_id": self.trial.config.group,
            "tools": self.tool_names,
            "max_steps": self.limits.max_steps,
        }
        if self.task.task.steps:  # a multi-step task: which step the instruction is
            metadata.update(task_step=self.task.task.steps[0].name, task_steps=len(self.task.task.steps))
        return metadata

    def _require_running(self) -> None:
        if self.runner is None:
            raise ServeError(ErrorCode.NO_EPISODE, "no episode: send reset first")
        if self.done:
            raise ServeError(ErrorCode.NO_EPISODE, "the episode is over: send reset for a new one")

    async def step(
        self, call: CallToolAction | MessageAction, sink: EventSink | None = None
    ) -> tuple[ServedObservation, float | None, bool]:
        """Run one tool call; the final step (submit, step limit) waits for the verifier and carries the
        reward. Unknown tools and bad arguments are answered with an error and cost no step."""
        self._require_running()
        if isinstance(call, MessageAction):
            if not self.agent.takes_messages:
                raise ServeError(
                    ErrorCode.VALIDATION_ERROR,
                    "message actions need a harness (evsys serve --harness NAME -m MODEL) or a Python task "
                    "with a respond hook",
                )
        elif call.tool_name not in self.tool_names:
            error = ToolError(
                error_type="tool_not_found",
                message=f"unknown tool {call.tool_name!r}; tools: {', '.join(self.tool_names)}",
            )
            return ServedObservation(tool_name=call.tool_name, error=error), None, False
        reply: asyncio.Future[ToolOutcome] = asyncio.get_running_loop().create_future()
        await self.agent.requests.put(_Request(call, reply))
        waited = await self._wait_reply(reply, self.limits.step_timeout_sec)
        tool_name = call.tool_name if isinstance(call, CallToolAction) else None
        if waited is None:  # the trial ended without answering (timeout, failure)
            return await self.final(ServedObservation(tool_name=tool_name))
        outcome = waited
        if outcome.error_kind == "bad_arguments":
            error = ToolError(error_type="invalid_args", message=outcome.content)
            return ServedObservation(tool_name=tool_name, error=error), None, False
        self.step_count += 1
        observation = ServedObservation(tool_name=tool_name, metadata={"step": self.step_count})
        if tool_name is None:  # a message: the environment's reply (none once it is done)
            observation.text = outcome.content or None
        else:
            observation.result = {"data": outcome.content, "is_error": outcome.is_error}
        if outcome.submitted and self.task.task.steps and isinstance(self.agent, ServedAgent):
            moved_on = await self._next_step(observation)
            if moved_on is not None:
                return moved_on
        if outcome.submitted or self.step_count >= self.limits.max_steps:
            return await self.final(observation)
        return observation, None, False

    async def _next_step(
        self, observation: ServedObservation
    ) -> tuple[ServedObservation, float | None, bool] | None:
        """After a multi-step task's submit: the scored step's reward and the next step's instruction once
        it starts, or None when the trial ends instead (the last step, a step below its min_reward)."""
        assert self.runner is not None and isinstance(self.agent, ServedAgent)
        next_run = self.agent.next_run
        waiting: set[asyncio.Future[Any]] = {next_run, self.runner}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if not next_run.done():
            return None
        *scored, current = self.trial.result.steps or []  # the step just scored, and the one now running
        step = scored[-1]
        observation.instruction = next_run.result()
        observation.metadata.update(
            {
                "task_step": current.name,
                "scored_step": step.name,
                "trial_name": self.trial.config.trial_name,
                "rewards": step.rewards,
                "failure": step.failure.model_dump(mode="json") if step.failure else None,
            }
        )
        return observation, step.reward, False

    async def _wait_reply(self, reply: asyncio.Future[T], step_timeout: float) -> T | None:
        """The agent's reply, or None when the trial ended without one (or it took past the step timeout
        plus a grace: then the episode is ended rather than the session left waiting)."""
        assert self.runner is not None
        limit = step_timeout + STEP_GRACE_SEC
        waiting: set[asyncio.Future[Any]] = {reply, self.runner}
        done, _ = await asyncio.wait(waiting, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        if reply in done:
            return reply.result()
        if not done:  # the tool never answered: end the episode rather than leave the session waiting
            self.leave("a tool call ran past the step timeout")
            reply.cancel()
        return None

    async def final(self, observation: ServedObservation) -> tuple[ServedObservation, float | None, bool]:
        """The trial's end: its reward, per-key rewards and failure in the observation."""
        assert self.runner is not None
        result = await asyncio.shield(self.runner)
        self.result = result
        observation.metadata.update(
            {
                "rewards": result.rewards,
                "trial_name": result.trial_name,
                "failure": result.failure.model_dump(mode="json") if result.failure else None,
                "ended_by": (result.agent_metadata or {}).get("ended_by"),
                "step": self.step_count,
            }
        )
        return observation, result.reward, True

    def leave(self, reason: str) -> None:
        """End the episode early: the agent phase stops at once (or the start is cancelled); the trial still
        verifies and records it in the background (`runner`)."""
        if self.runner is None or self.runner.done():
            return
        self.left_early = True
        if self.agent.ready.done():
            self.agent.leave(reason)
        else:
            self.runner.cancel()

    def state(self) -> ServedState:
        """What `state()` reports."""
        reward = self.result.reward if self.result is not None else None
        return ServedState(
            episode_id=self.episode_id,
            step_count=self.step_count,
            task=self.task.name,
            trial_name=self.trial.config.trial_name,
            done=self.done,
            reward=reward,
            max_steps=self.limits.max_steps,
        )

    async def wait(self) -> None:
        """Wait for the trial to finish (its files written), whatever happened."""
        if self.runner is not None:
            await asyncio.wait({self.runner})
