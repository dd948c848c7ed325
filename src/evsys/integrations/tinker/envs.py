"""tinker-cookbook RL environments over evsys tasks: every env is an evsys trial, its reward the verifier's.

`EvsysRLDataset` plans any evsys tasks — whatever `evsys run` takes: a task directory or a directory of them,
a Harbor `dataset.toml` directory, `NAME@VERSION`, a Python-task dataset, a file of repository rows, loaded
`Task`s, or Python tasks / repository rows in memory (evsys.integrations.tinker.catalog) — once, like the
trials of a job, and hands out one `EvsysEnvGroupBuilder` per task. `make_envs()` starts `group_size` episodes
of the task: each is a trial of the dataset's job (an `Episode` of evsys.engine.episodes: the task's sandbox
and environment, the tools it offers, the verifier chain, result.json and trajectory.json under
`<jobs_dir>/<job_name>/`). Each env is the cookbook's own tool-use env
(evsys.integrations.tinker.episode_env): `initial_observation()` renders the system prompt, the episode's
tools (a Python task's own selection and custom tools, else evsys's built-in ones; the task's MCP tools) and
the task's instruction with the cookbook renderer; `step(action tokens)` parses the tool calls, runs them as
steps of the episode and renders the next observation; a turn without tool calls of a task with a respond hook
gets the hook's reply as the next user message. The episode ends on a final answer (a turn without tool calls:
it is submitted as the answer), on `submit`, when the respond hook is done, or at `max_turns` (the task's own,
else the dataset's); its reward, at the end, is the trial's reward from the task's verifiers (each named
reward also in the step's metrics) under the dataset's integrity policy: `integrity="zero"` (the default)
makes a trial with integrity findings a 0, `"flag"` only counts them (`evsys/integrity_findings`). The
cookbook computes its group's advantages itself with no way to leave one sample out, so `"screen"` is refused
here.

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
import secrets
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType

import chz
from tinker_cookbook import tokenizer_utils
from tinker_cookbook.renderers import get_renderer
from tinker_cookbook.renderers.base import Message, Renderer
from tinker_cookbook.rl.message_env import EnvFromMessageEnv
from tinker_cookbook.rl.types import Env, EnvGroupBuilder, Metrics, RLDataset, RLDatasetBuilder, Trajectory
from tinker_cookbook.tool_use.agent_tool_message_env import AgentToolMessageEnv

from evsys.agent.loop import DEFAULT_SYSTEM_PROMPT
from evsys.engine import AgentSpec, JobConfig
from evsys.engine.episodes import Episode, EpisodeLimits, ServedTask, ServeService, ServeSettings
from evsys.engine.episodes.agents import EpisodeAgent
from evsys.engine.episodes.catalog import SERVED_AGENT
from evsys.integrations.tinker.catalog import Tasks, plan_catalog
from evsys.integrations.tinker.episode_env import EpisodeReward, episode_env, episode_tools
from evsys.records import IntegrityPolicy
from evsys.trajectory.integrity import integrity_policy


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
        task = self.task.task
        system_prompt = task.system_prompt or self.dataset.system_prompt
        prefix = renderer.create_conversation_prefix_with_tools(
            tools=[t.to_spec() for t in episode_tools(episode)], system_prompt=system_prompt
        )
        messages: list[Message] = [*prefix, {"role": "user", "content": task.instruction}]
        grader = EpisodeReward(episode, self.dataset.integrity)
        env = episode_env(
            renderer,
            episode,
            messages,
            grader,
            max_turns=task.interaction.max_turns or self.dataset.max_turns,
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
