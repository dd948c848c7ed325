"""tinker-cookbook RL environments over evsys tasks: every env is an evsys trial, its reward the verifier's.

`EvsysRLDataset` plans any evsys tasks — whatever `evsys run` takes: a task directory or a directory of them,
a Harbor `dataset.toml` directory, `NAME@VERSION`, a Python-task dataset, a file of repository rows, loaded
`Task`s, or Python tasks / repository rows in memory (evsys.integrations.tinker.catalog) — once, like the
trials of a job, and
hands out one `EvsysEnvGroupBuilder` per task. `make_envs()` starts `group_size` episodes of the task: each is
a trial of the dataset's job (an `Episode` of evsys.engine.episodes: the task's sandbox and environment, the
loop agent's tools, the verifier chain, result.json and trajectory.json under `<jobs_dir>/<job_name>/`). Each
env is the cookbook's own tool-use env (`build_agent_tool_env`): `initial_observation()` renders the system
prompt, the tools and the task's instruction with the cookbook renderer; `step(action tokens)` parses the tool
calls, runs them in the episode's sandbox and renders the next observation. The episode ends on a final answer
(a turn without tool calls: it is submitted as the answer), on `submit`, or at `max_turns`; its reward, at the
end, is the trial's reward from the task's verifiers (each named reward also in the step's metrics) under the
dataset's integrity policy: `integrity="zero"` (the default) makes a trial with integrity findings a 0,
`"flag"` only counts them (`evsys/integrity_findings`). The cookbook computes its group's advantages itself
with no way to leave one sample out, so `"screen"` is refused here.

`cleanup()` (which the cookbook's `do_group_rollout` always calls, also on error or cancel) ends any episode
still running — the trial still verifies and records it — and waits until every sandbox is released; the
dataset's `close()` writes the job's result.json and stops the idle sandboxes.

    dataset = await EvsysRLDataset.create("examples/tasks", model_name="Qwen/Qwen3-8B",
                                          renderer_name="qwen3", batch_size=4, group_size=8)
    async with dataset:
        groups = [await do_group_rollout(b, policy) for b in dataset.get_batch(0)]

Builders hold the dataset's serving state (its sandbox pool and job), so they run in the process that created
the dataset (not pickled to rollout workers).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import chz
from tinker_cookbook import tokenizer_utils
from tinker_cookbook.renderers import get_renderer
from tinker_cookbook.renderers.base import Message, Renderer, get_text_content
from tinker_cookbook.rl.message_env import EnvFromMessageEnv
from tinker_cookbook.rl.types import Env, EnvGroupBuilder, Metrics, RLDataset, RLDatasetBuilder, Trajectory
from tinker_cookbook.tool_use import build_agent_tool_env
from tinker_cookbook.tool_use.agent_tool_message_env import AgentToolMessageEnv
from tinker_cookbook.tool_use.tools import error_tool_result, simple_tool_result
from tinker_cookbook.tool_use.types import Tool, ToolInput, ToolResult

from evsys.agent.loop import DEFAULT_SYSTEM_PROMPT
from evsys.agent.tools import SandboxTools
from evsys.engine import AgentSpec, JobConfig
from evsys.engine.episodes import (
    Episode,
    EpisodeLimits,
    ServedTask,
    ServeError,
    ServeService,
    ServeSettings,
)
from evsys.engine.episodes.agents import EpisodeAgent
from evsys.engine.episodes.catalog import SERVED_AGENT
from evsys.engine.episodes.protocol import CallToolAction
from evsys.integrations.tinker.catalog import Tasks, plan_catalog
from evsys.records import IntegrityPolicy, TrialResult
from evsys.trajectory.integrity import integrity_policy, judged_reward


class EpisodeTool:
    """One evsys tool (bash, read_file, write_file, str_replace, submit) as the cookbook's `Tool`, run in an
    episode's sandbox; the call that ends the episode (submit, the step limit) stops the cookbook's env."""

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
        """Run the call as a step of the episode; its output (or error) is the tool message."""
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
            answers = [m for m in history if m.get("role") == "assistant"]
            answer = get_text_content(answers[-1]) if answers else ""
            with contextlib.suppress(ServeError):  # it ended meanwhile: its result is recorded either way
                await self.episode.step(CallToolAction(tool_name="submit", arguments={"message": answer}))
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


class EvsysEnvGroupBuilder(EnvGroupBuilder):
    """`group_size` envs of one evsys task, each an episode (a trial) in its own sandbox."""

    def __init__(self, dataset: EvsysRLDataset, task: ServedTask, group_size: int) -> None:
        self.dataset = dataset
        self.task = task
        self.group_size = group_size
        self.episodes: list[Episode[EpisodeAgent]] = []
        self.graders: dict[int, EpisodeReward] = {}  # by id() of the env they grade

    async def make_envs(self) -> Sequence[Env]:
        """Start the group's episodes (sandboxes up, tools ready) and wrap each in the cookbook's env."""
        renderer = self.dataset.renderer()
        group = f"tinker-{secrets.token_hex(6)}"  # the builder's envs, and only they, are one group
        service = self.dataset.service
        fresh = [service.new_episode(self.task, None, group=group) for _ in range(self.group_size)]
        self.episodes.extend(fresh)
        started = await asyncio.gather(*(e.start() for e in fresh), return_exceptions=True)
        failed = [r for r in started if isinstance(r, BaseException)]
        if failed:
            await self.cleanup()
            raise failed[0]
        return [self._env(episode, renderer) for episode in fresh]

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        """An env the cookbook ended without grading (its token budget, a parse error, context overflow) has
        its episode submitted now: the verifier's reward adds to the cookbook's penalty. Graded ones add 0."""
        rewards: list[tuple[float, Metrics]] = []
        for env in env_group:
            grader = self.graders.pop(id(env))
            rewards.append((0.0, {}) if grader.graded else await grader(_history(env)))
        return rewards

    def _env(self, episode: Episode[EpisodeAgent], renderer: Renderer) -> Env:
        tools: list[Tool] = [EpisodeTool(schema, episode) for schema in SandboxTools.schemas()]
        system_prompt = self.task.task.system_prompt or self.dataset.system_prompt
        prefix = renderer.create_conversation_prefix_with_tools(
            tools=[t.to_spec() for t in tools], system_prompt=system_prompt
        )
        messages: list[Message] = [*prefix, {"role": "user", "content": self.task.task.instruction}]
        grader = EpisodeReward(episode, self.dataset.integrity)
        env = build_agent_tool_env(
            renderer=renderer,
            tools=tools,
            initial_messages=messages,
            reward_fn=grader,
            max_turns=self.dataset.max_turns,
            max_trajectory_tokens=self.dataset.max_trajectory_tokens,
        )
        self.graders[id(env)] = grader
        return env

    async def cleanup(self) -> None:
        """End every episode still running (it is verified and recorded) and wait until all are released."""
        episodes, self.episodes = self.episodes, []
        self.graders.clear()
        for episode in episodes:
            episode.leave("the rollout ended before the episode did")
        await asyncio.gather(*(episode.wait() for episode in episodes), return_exceptions=True)

    def logging_tags(self) -> list[str]:
        """Metrics are aggregated under `evsys` and the task's name."""
        return ["evsys", self.task.name]


def _history(env: Env) -> list[Message]:
    """The messages of a cookbook tool-use env's episode so far."""
    assert isinstance(env, EnvFromMessageEnv) and isinstance(env.message_env, AgentToolMessageEnv)
    return env.message_env.history


class EvsysRLDataset(RLDataset):
    """The cookbook's `RLDataset` over evsys tasks: batches of `EvsysEnvGroupBuilder`s, in the tasks' order
    (see the module docstring). Create it with `await EvsysRLDataset.create(...)`; `close()` it at the end."""

    def __init__(
        self,
        service: ServeService,
        *,
        model_name: str,
        renderer_name: str,
        batch_size: int,
        group_size: int,
        max_turns: int,
        max_trajectory_tokens: int | None = None,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        integrity: IntegrityPolicy | str = IntegrityPolicy.ZERO,
    ) -> None:
        self.integrity = cookbook_policy(integrity)
        self.service = service
        self.model_name = model_name
        self.renderer_name = renderer_name
        self.batch_size = batch_size
        self.max_turns = max_turns
        self.max_trajectory_tokens = max_trajectory_tokens
        self.system_prompt = system_prompt
        self.builders = [EvsysEnvGroupBuilder(self, task, group_size) for task in service.catalog.tasks]
        self._renderer: Renderer | None = None

    @classmethod
    async def create(
        cls,
        tasks: Tasks,
        *,
        model_name: str,
        renderer_name: str,
        batch_size: int = 1,
        group_size: int = 4,
        max_turns: int = 10,
        max_trajectory_tokens: int | None = None,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        jobs_dir: Path | str = "jobs",
        job_name: str | None = None,
        sandbox: str = "local",
        limits: EpisodeLimits | None = None,
        integrity: IntegrityPolicy | str = IntegrityPolicy.ZERO,
        registry_path: Path | str | None = None,
        registry_url: str | None = None,
    ) -> EvsysRLDataset:
        """Plan `tasks` (anything `evsys run` takes, evsys.integrations.tinker.catalog; a `NAME@VERSION`
        from `registry_path`, `registry_url` or Harbor's registry) as the job `<jobs_dir>/<job_name>`
        (episodes run on the `sandbox` backend within `limits`); `model_name` and `renderer_name` choose the
        cookbook tokenizer and renderer; `integrity` is "zero" or "flag" (see the module docstring)."""
        policy = cookbook_policy(integrity)  # refused before any sandbox starts
        job = JobConfig(
            datasets=[Path(".")],  # plan_catalog sets the dataset the tasks are (or are saved as)
            agents=[AgentSpec(name=SERVED_AGENT)],
            job_name=job_name or f"tinker-{datetime.now():%Y-%m-%d__%H-%M-%S}-{secrets.token_hex(3)}",
            jobs_dir=Path(jobs_dir),
            sandbox=sandbox,
        )
        catalog = await plan_catalog(tasks, job, registry_path=registry_path, registry_url=registry_url)
        settings = ServeSettings(
            max_sessions=max(64, batch_size * group_size), limits=limits or EpisodeLimits()
        )
        service = ServeService(catalog, settings)
        await service.start()
        return cls(
            service,
            model_name=model_name,
            renderer_name=renderer_name,
            batch_size=batch_size,
            group_size=group_size,
            max_turns=max_turns,
            max_trajectory_tokens=max_trajectory_tokens,
            system_prompt=system_prompt,
            integrity=policy,
        )

    def renderer(self) -> Renderer:
        """The cookbook renderer for the policy's model (built once)."""
        if self._renderer is None:
            tokenizer = tokenizer_utils.get_tokenizer(self.model_name)
            self._renderer = get_renderer(self.renderer_name, tokenizer, model_name=self.model_name)
        return self._renderer

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        """The `index`-th batch of group builders."""
        return self.builders[index * self.batch_size : (index + 1) * self.batch_size]

    def __len__(self) -> int:
        return -(-len(self.builders) // self.batch_size)

    async def close(self) -> None:
        """End every episode, write the job's result.json and stop the idle sandboxes."""
        await asyncio.gather(*(b.cleanup() for b in self.builders))
        await self.service.close()

    async def __aenter__(self) -> EvsysRLDataset:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


def cookbook_policy(integrity: IntegrityPolicy | str) -> IntegrityPolicy:
    """`integrity` as a policy the cookbook can apply: "zero" or "flag" ("screen" is refused, see above)."""
    policy = integrity_policy(integrity)
    if policy == IntegrityPolicy.SCREEN:
        raise ValueError(
            "integrity='screen' needs a trainer that leaves one sample out of its group's advantages; the "
            "cookbook computes them itself: use 'zero' or 'flag'"
        )
    return policy


@chz.chz
class EvsysDatasetBuilder(RLDatasetBuilder):
    """The cookbook's `RLDatasetBuilder` (for its train config) over an evsys dataset path or `NAME@VERSION`
    (from `registry_path`, `registry_url` or Harbor's registry)."""

    dataset: str
    model_name: str
    renderer_name: str
    batch_size: int = 1
    group_size: int = 4
    max_turns: int = 10
    max_trajectory_tokens: int | None = None
    jobs_dir: str = "jobs"
    job_name: str | None = None
    sandbox: str = "local"
    integrity: str = "zero"
    registry_path: str | None = None
    registry_url: str | None = None

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        """The training dataset (no separate test set)."""
        dataset = await EvsysRLDataset.create(
            self.dataset,
            model_name=self.model_name,
            renderer_name=self.renderer_name,
            batch_size=self.batch_size,
            group_size=self.group_size,
            max_turns=self.max_turns,
            max_trajectory_tokens=self.max_trajectory_tokens,
            jobs_dir=self.jobs_dir,
            job_name=self.job_name,
            sandbox=self.sandbox,
            integrity=self.integrity,
            registry_path=self.registry_path,
            registry_url=self.registry_url,
        )
        return dataset, None
