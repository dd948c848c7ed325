"""evsys Python tasks as a verifiers (v1) environment: their own tools and respond hooks in a rollout.

`EvsysTaskset` (`--env.taskset.dataset <dataset>`) yields one verifiers task per evsys task of a dataset (a
Python-task dataset such as examples/guess, or any dataset `evsys run` takes). `EvsysHarness` plays each
rollout as an evsys episode (evsys.integrations.episodes, the state `evsys serve` keeps, in this process):
it asks the model through the rollout's interception endpoint (so verifiers records every call, tokens
included) with the tools the task offers (`VerifiedTask(tools=[...])`: its selection, custom Python tools,
MCP tools), runs each tool call in the episode (arguments validated as under `evsys run -a loop`), and
answers a model turn without tool calls with the task's respond hook, as the next user message, until the
episode ends (the hook's `Done`, `submit`, `max_turns`) or `max_turns` model calls (the harness's own
limit). The task's reward `evsys` is the evsys verifier's reward for that episode; its per-key rewards are
the trace's `evsys/<key>` metrics. Export both from a taskset module:

    from evsys.integrations.verifiers.turns import EvsysHarness, EvsysTaskset
    __all__ = ["EvsysTaskset", "EvsysHarness"]

then `vf-eval my_module --env.taskset.dataset examples/guess -m <model>`."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from openai import APIStatusError, AsyncOpenAI
from verifiers.v1.clients import ModelContext
from verifiers.v1.configs.harness import HarnessConfig
from verifiers.v1.runtimes import ProgramResult, Runtime
from verifiers.v1.trace import Trace

from evsys.engine.episodes.protocol import ServedObservation
from evsys.integrations.episodes import EpisodeClient, EpisodeRunner
from evsys.trajectory.integrity import JudgedReward

_RUNNERS: dict[tuple[str, str], EpisodeRunner] = {}
_RUNNERS_LOCK = threading.Lock()
_FINISHED: dict[str, JudgedReward] = {}
"""Each finished episode's result by the verifiers trace it was played for (the task's reward reads it)."""


def episode_runner(dataset: str, jobs_dir: str) -> EpisodeRunner:
    """The process's `EpisodeRunner` for `dataset` (one per dataset and jobs directory, closed at exit)."""
    key = (str(Path(dataset).resolve()), str(Path(jobs_dir).resolve()))
    with _RUNNERS_LOCK:
        if key not in _RUNNERS:
            _RUNNERS[key] = EpisodeRunner(key[0], jobs_dir=key[1])
        return _RUNNERS[key]


class EvsysTaskData(vf.TaskData):
    """A verifiers task naming one evsys task (`task`, its full name) of `dataset`."""

    task: str
    dataset: str
    jobs_dir: str = "jobs"


class EvsysTask(vf.Task[EvsysTaskData]):
    """One evsys task; its reward is the evsys verifier's, for the episode the harness played."""

    @vf.reward  # type: ignore[untyped-decorator]  # (verifiers is untyped where mypy runs)
    async def evsys(self, trace: Trace) -> float:
        """The episode's reward under the runner's integrity policy (0 when it has none: the trial failed
        before its verifier scored it, or was screened); its per-key rewards become the trace's
        `evsys/<key>` metrics."""
        judged = _FINISHED.pop(trace.id, None)
        if judged is None:
            return 0.0
        trace.record_metrics({f"evsys/{key}": value for key, value in judged.rewards.items()})
        return float(judged.baseline_reward or 0.0)


class EvsysTasksetConfig(vf.TasksetConfig):
    """`--env.taskset.dataset` (what `evsys run` takes) and `--env.taskset.jobs-dir` (where every episode's
    trial directory is written)."""

    dataset: str = ""
    jobs_dir: str = "jobs"


class EvsysTaskset(vf.Taskset[EvsysTask, EvsysTasksetConfig]):
    """Every task of an evsys dataset, its instruction as the prompt."""

    def load(self) -> list[EvsysTask]:
        """One `EvsysTask` per task of the dataset, in catalog order."""
        if not self.config.dataset:
            raise ValueError("EvsysTaskset needs a dataset: --env.taskset.dataset <path or NAME@VERSION>")
        runner = episode_runner(self.config.dataset, self.config.jobs_dir)
        return [self._task(runner, name) for name in runner.task_names]

    def _task(self, runner: EpisodeRunner, name: str) -> EvsysTask:
        data = EvsysTaskData(
            name=name,
            prompt=runner.instruction(name),
            task=name,
            dataset=self.config.dataset,
            jobs_dir=self.config.jobs_dir,
        )
        return EvsysTask(data, self.config.task)


class EvsysHarnessConfig(HarnessConfig):
    """`max_turns`: model calls per rollout at most (the task's own `max_turns` usually ends it first)."""

    max_turns: int = 32


class EvsysHarness(vf.Harness[EvsysHarnessConfig]):
    """Plays an `EvsysTask` as an evsys episode (see the module doc); runs nothing in verifiers' runtime."""

    NEEDS_CONTAINER = False
    EXECUTES_CODE = False  # tool calls run in the episode's evsys sandbox or host-side tools, not the runtime

    async def launch(
        self,
        ctx: ModelContext,
        trace: Trace,
        runtime: Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
    ) -> ProgramResult:
        """Play the episode; the verifier's result waits for the task's reward."""
        if not isinstance(data, EvsysTaskData):
            raise vf.HarnessError(f"EvsysHarness plays EvsysTaskset's tasks, not {type(data).__name__}")
        runner = await asyncio.to_thread(episode_runner, data.dataset, data.jobs_dir)
        client = await asyncio.to_thread(runner.open, "verifiers")
        try:
            await asyncio.to_thread(client.start, data.task)
            try:
                async with AsyncOpenAI(base_url=endpoint, api_key=secret) as model:
                    ended = await _play(client, model, ctx.model, data.prompt_text, self.config.max_turns)
            except APIStatusError:
                if trace.stop_condition is None:
                    raise
                ended = f"verifiers stopped the rollout ({trace.stop_condition})"  # its limits, its @stops
            _FINISHED[trace.id] = await asyncio.to_thread(client.judged)
        finally:
            await asyncio.to_thread(client.close)
        return ProgramResult(exit_code=0, stdout=ended, stderr="")

    async def cleanup(self, trace: Trace, runtime: Runtime) -> None:
        """Forget the episode's result when the task's reward did not read it (verifiers skips scoring a
        failed rollout, e.g. a provider error)."""
        _FINISHED.pop(trace.id, None)


async def _play(client: EpisodeClient, model: AsyncOpenAI, name: str, prompt: str, max_turns: int) -> str:
    """The model's turns until the episode ends; how it ended."""
    tools = client.tool_schemas(reply=False)  # the task's own choice; its hook hears turns without tool calls
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    for _ in range(max_turns):
        request: dict[str, Any] = {"model": name, "messages": messages, **({"tools": tools} if tools else {})}
        answer = await model.chat.completions.create(**request)
        message = answer.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if message.tool_calls:
            done = await _run_tools(client, message.tool_calls, messages)
        else:
            done = await _respond(client, message.content or "", messages)
        if done:
            return "the episode ended"
    return f"{max_turns} model turns"


async def _run_tools(client: EpisodeClient, calls: list[Any], messages: list[dict[str, Any]]) -> bool:
    """Run each call in the episode; their results become tool messages. True once the episode ended."""
    for call in calls:
        try:
            arguments = json.loads(call.function.arguments or "{}")
        except json.JSONDecodeError as exc:
            observation, done = None, False
            content = f"error: {call.function.name}: arguments are not JSON ({exc})"
        else:
            observation, _, done = await asyncio.to_thread(client.tool, call.function.name, arguments)
            content = _tool_text(observation)
        messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        if done:
            return True
    return False


async def _respond(client: EpisodeClient, text: str, messages: list[dict[str, Any]]) -> bool:
    """The task's respond hook answers the model's turn (the next user message). True once it ended (a task
    without a hook ends at the model's first turn without tool calls)."""
    if not client.running or not client.answers_turns:
        return True
    observation, _, done = await asyncio.to_thread(client.message, text)
    if not done and observation.text is not None:
        messages.append({"role": "user", "content": observation.text})
    return done or observation.text is None


def _tool_text(observation: ServedObservation) -> str:
    if observation.error is not None:
        return observation.error.message
    return str((observation.result or {}).get("data", ""))
