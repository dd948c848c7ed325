"""One tinker-cookbook env over one evsys episode: the episode's tools as the cookbook's `Tool`s, the task's
respond hook answering the model's turns, and the verifier's reward when it ends.

The tools are the ones the episode offers: a Python task's own selection (`VerifiedTask(tools=[...])`, its
built-in ones, its custom tools run host-side with schema-validated arguments as under `-a loop`, its MCP
tools), else evsys's built-in ones and the task's MCP tools. A tool the task leaves out is not offered, and a
call of it is refused by the cookbook (`Tool '<name>' not found`) without reaching the episode.

`EpisodeMessageEnv` is the cookbook's tool-use message env with one addition for a task with a respond hook:
a turn with text and no tool call is the model's message to the hook, and the hook's reply is the next user
message, so the env's next observation (`Env.step`'s) ends with it; the hook saying done ends the episode,
graded. The last allowed turn of a task that offers no `submit` goes to the hook too (so the verifier sees it,
as under `-a loop`), and the episode ends after it whatever the hook answers. Without a hook, for an empty
turn, or on the last allowed turn of a task that offers `submit`, such a turn is the final answer as in the
cookbook's env: it is submitted as the answer (a task without a hook that offers no `submit` is ended as
after the model's last turn).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from tinker_cookbook.renderers import Renderer
from tinker_cookbook.renderers.base import Message, get_text_content
from tinker_cookbook.rl.message_env import EnvFromMessageEnv, MessageStepResult
from tinker_cookbook.rl.types import STOP_METRIC_PREFIX, Logs, StopReason
from tinker_cookbook.tool_use.agent_tool_message_env import AgentToolMessageEnv
from tinker_cookbook.tool_use.tools import error_tool_result, simple_tool_result
from tinker_cookbook.tool_use.types import Tool, ToolInput, ToolResult

from evsys.engine.episodes import Episode, ServeError
from evsys.engine.episodes.agents import EpisodeAgent
from evsys.engine.episodes.protocol import CallToolAction, MessageAction
from evsys.integrations.episodes import SUBMIT
from evsys.records import IntegrityPolicy, TrialResult
from evsys.trajectory.integrity import judged_reward

FAILED_PARSE_REWARD = -0.1  # build_agent_tool_env's: an unparseable turn's reward
COMPLETED = f"{STOP_METRIC_PREFIX}{StopReason.COMPLETED}"
MAX_TURNS = f"{STOP_METRIC_PREFIX}{StopReason.MAX_TURNS}"


class EpisodeTool:
    """One tool the episode offers as the cookbook's `Tool`, run as a step of the episode (in its sandbox, or
    host-side for a custom tool); the call that ends the episode (submit, the step limit) stops the env."""

    def __init__(self, schema: dict[str, Any], episode: Episode[EpisodeAgent]) -> None:
        self.function = schema["function"]
        self.episode = episode

    @property
    def name(self) -> str:
        """The tool's name, as the model calls it."""
        return str(self.function["name"])

    @property
    def description(self) -> str:
        """What the model is told the tool does."""
        return str(self.function.get("description", ""))

    @property
    def parameters_schema(self) -> dict[str, Any]:
        """The JSON schema of the tool's arguments."""
        return dict(self.function.get("parameters", {}))

    def to_spec(self) -> Any:
        """The cookbook's `ToolSpec` (what its renderer shows the model)."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters_schema}

    async def run(self, input: ToolInput) -> ToolResult:
        """Run the call as a step of the episode; its output (or error: bad arguments, the tool's failure) is
        the tool message."""
        call_id = input.call_id or ""
        if self.episode.done:
            return error_tool_result("the episode is over", call_id=call_id, name=self.name, should_stop=True)
        try:
            observation, _, done = await self.episode.step(
                CallToolAction(tool_name=self.name, arguments=input.arguments)
            )
        except ServeError as exc:
            return error_tool_result(str(exc), call_id=call_id, name=self.name, should_stop=self.episode.done)
        if observation.error is not None:
            return error_tool_result(observation.error.message, call_id=call_id, name=self.name)
        content = str((observation.result or {}).get("data", ""))
        return simple_tool_result(content, call_id=call_id, name=self.name, should_stop=done)


def episode_tools(episode: Episode[EpisodeAgent]) -> list[Tool]:
    """The tools a started episode offers, as the cookbook's."""
    return [EpisodeTool(schema, episode) for schema in episode.agent.tool_schemas]


async def trial_result(episode: Episode[EpisodeAgent]) -> TrialResult | None:
    """The episode's recorded trial (waiting for it), or None when it never ran to the end."""
    await episode.wait()
    runner = episode.runner
    if runner is None or runner.cancelled() or runner.exception() is not None:
        return None
    return runner.result()


class EpisodeReward:
    """The cookbook env's `reward_fn`: ends the episode (a final answer is submitted as the answer) and
    returns the trial's reward from the task's verifier chain under the `integrity` policy, each named
    reward as a metric."""

    def __init__(
        self, episode: Episode[EpisodeAgent], integrity: IntegrityPolicy = IntegrityPolicy.ZERO
    ) -> None:
        self.episode = episode
        self.integrity = integrity
        self.graded = False

    async def __call__(self, history: list[Message]) -> tuple[float, dict[str, float]]:
        """Grade the episode once it has ended."""
        self.graded = True
        if not self.episode.done:
            await self._end(history)
        result = await trial_result(self.episode)
        if result is None:
            return 0.0, {"evsys/failed": 1.0}
        judged = judged_reward(result, self.integrity)
        metrics = {f"evsys/{key}": float(value) for key, value in judged.rewards.items()}
        if result.failure is not None:
            metrics["evsys/failed"] = 1.0
        if result.integrity:
            metrics["evsys/integrity_findings"] = float(len(result.integrity))
        return judged.reward or 0.0, metrics

    async def _end(self, history: list[Message]) -> None:
        """Submit the last answer, or end the run as after the model's last turn when there is no submit."""
        if SUBMIT not in self.episode.tool_names:
            self.episode.agent.finish()
            return
        answers = [m for m in history if m.get("role") == "assistant"]
        answer = get_text_content(answers[-1]) if answers else ""
        with contextlib.suppress(ServeError):  # it ended meanwhile: its result is recorded either way
            await self.episode.step(CallToolAction(tool_name=SUBMIT, arguments={"message": answer}))


@dataclass
class EpisodeMessageEnv(AgentToolMessageEnv):
    """The cookbook's tool-use message env over an evsys episode whose task may answer the model's turns
    with a respond hook (see the module docstring)."""

    episode: Episode[EpisodeAgent] = field(kw_only=True)

    async def step(self, message: Message) -> MessageStepResult:
        """A turn for the respond hook gets its reply as the next user message (or ends the episode, graded,
        when the hook is done); any other turn is the cookbook's."""
        text = get_text_content(message)
        if not self._for_the_hook(message, text):
            return await super().step(message)
        self._turn_count += 1
        self.history.append(message)
        logs: Logs = {"assistant_content": text}
        reply = await self._reply(text)
        last = self._turn_count >= self.max_turns
        if reply is not None:
            self.history.append({"role": "user", "content": reply})
            if not last:
                return MessageStepResult(0.0, episode_done=False, next_messages=self.history, logs=logs)
        reward, metrics = await self._grade()
        metrics[MAX_TURNS if reply is not None else COMPLETED] = 1.0
        return MessageStepResult(
            reward=reward, episode_done=True, next_messages=self.history, metrics=metrics, logs=logs
        )

    def _for_the_hook(self, message: Message, text: str) -> bool:
        """A turn with text and no tool call of a running episode whose task has a respond hook, but the last
        allowed one of a task that offers `submit` (that one is submitted as the answer)."""
        calls = message.get("tool_calls") or message.get("unparsed_tool_calls")
        last = self._turn_count + 1 >= self.max_turns and SUBMIT in self.episode.tool_names
        talks = self.episode.agent.takes_messages and not self.episode.done
        return talks and not calls and not last and bool(text.strip())

    async def _reply(self, text: str) -> str | None:
        """The hook's reply to the model's turn; None once the episode is over (the hook is done, or the
        episode ended meanwhile: its step limit, the hook's failure)."""
        try:
            observation, _, done = await self.episode.step(MessageAction(message=text))
        except ServeError:
            return None
        return None if done else observation.text or ""


def episode_env(
    renderer: Renderer,
    episode: Episode[EpisodeAgent],
    initial_messages: list[Message],
    grader: EpisodeReward,
    *,
    max_turns: int,
    max_trajectory_tokens: int | None,
) -> EnvFromMessageEnv:
    """The cookbook env (as `build_agent_tool_env` builds it) over a started episode: its tools run in the
    order the model calls them (they share the episode's state), its respond hook answers the model."""
    message_env = EpisodeMessageEnv(
        tools=episode_tools(episode),
        initial_messages=initial_messages,
        max_turns=max_turns,
        reward_fn=grader,
        failed_parse_reward=FAILED_PARSE_REWARD,
        tool_execution="sequential",
        episode=episode,
    )
    return EnvFromMessageEnv(
        renderer=renderer,
        message_env=message_env,
        failed_parse_reward=FAILED_PARSE_REWARD,
        max_trajectory_tokens=max_trajectory_tokens,
    )
