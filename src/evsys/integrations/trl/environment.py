"""`GRPOTrainer(environment_factory=...)` over evsys tasks: one evsys episode (a sandboxed trial) per rollout.

TRL creates environment instances with a zero-argument factory, calls `reset(**row)` with each dataset row
(the returned text is appended to the row's last user message), exposes every other public method as a tool
(schema from its type hints and docstring) and, once the rollout's tool loop ends, calls `get_reward()`.

`EvsysTrlEnvironment.reset` starts an episode of the row's `task` (a task name of the runner's dataset: a task
directory, a directory of tasks, Python tasks or repository rows) and returns its instruction; the tools are
the loop agent's (`bash`, `read_file`, `write_file`, `str_replace`), run in the episode's sandbox as the
task's agent user; `get_reward` ends the episode, runs the task's verifier chain (the trial's own verifier
path) and returns its reward under the runner's integrity policy (`EnvironmentFactory(...,
integrity="zero" | "screen" | "flag")`). Every episode is recorded as a trial under the runner's job
directory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from evsys.agent.tools import TOOL_SCHEMAS
from evsys.integrations.episodes import EpisodeClient, EpisodeRunner
from evsys.model.render import HERMES_CHATML_TEMPLATE
from evsys.records import TrialResult

TOOL_SPECS = {s["function"]["name"]: s["function"] for s in TOOL_SCHEMAS}
EPISODE_OVER = "The episode is over: no more tool calls run."


def _google_docstring(name: str) -> str:
    """A tool's docstring in the Google style transformers turns into a JSON schema, from its evsys schema."""
    spec = TOOL_SPECS[name]
    lines = [spec["description"], "", "Args:"]
    for arg, prop in spec["parameters"]["properties"].items():
        lines.append(f"    {arg}: {prop.get('description') or arg.replace('_', ' ').capitalize() + '.'}")
    return "\n".join(lines) + "\n"


def _documented(fn: Callable[..., str]) -> Callable[..., str]:
    fn.__doc__ = _google_docstring(fn.__name__)
    return fn


class EvsysTrlEnvironment:
    """One rollout's environment: an evsys episode of the row's task. Public methods are TRL tools."""

    def __init__(self, runner: EpisodeRunner) -> None:
        self._runner = runner
        self._client: EpisodeClient | None = None
        self.result: TrialResult | None = None

    def reset(self, task: str | None = None, seed: int | None = None, **row: Any) -> str:
        """Start an episode of `task` (or the task at `seed`) in a fresh sandbox; return its instruction."""
        if self._client is None:
            self._client = self._runner.open("trl")
        self.result = None
        observation = self._client.start(task, seed=seed)
        return observation.instruction or ""

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self._client is None or not self._client.running:
            return EPISODE_OVER
        observation, _, done = self._client.tool(name, arguments)
        if observation.error is not None:
            return f"Error: {observation.error.message}"
        text = str((observation.result or {}).get("data", ""))
        return f"{text}\n{EPISODE_OVER}" if done else text

    @_documented
    def bash(self, command: str) -> str:
        return self._call("bash", {"command": command})

    @_documented
    def read_file(self, path: str) -> str:
        return self._call("read_file", {"path": path})

    @_documented
    def write_file(self, path: str, content: str) -> str:
        return self._call("write_file", {"path": path, "content": content})

    @_documented
    def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        return self._call("str_replace", {"path": path, "old_str": old_str, "new_str": new_str})

    def get_reward(self) -> float | None:
        """End the episode, run the task's verifier chain and return its reward under the runner's integrity
        policy; None when the trial failed before its verifier could score it, or was screened for its
        integrity findings (TRL leaves it out of the group's baseline). A failure the agent caused
        itself (`agent_exhausted_resources`) is 0, a wrong answer. The sandbox is released either way."""
        if self._client is None:
            return None
        self.result = self._client.finish()
        return self._client.judged().baseline_reward


class EnvironmentFactory:
    """The zero-argument factory TRL's `environment_factory` takes, over one `EpisodeRunner`.

    `EnvironmentFactory("examples/tasks", jobs_dir="jobs")` serves the dataset's tasks; keyword arguments
    are the runner's (sandbox backend, step limit, job name, ...). `dataset()` gives a training dataset of
    its tasks (an unknown task name is refused, naming the known ones); `close()` (also run at exit, before
    the interpreter's thread pools stop) releases every sandbox and writes the job's result.json.
    """

    def __init__(self, dataset: Any = None, *, runner: EpisodeRunner | None = None, **options: Any) -> None:
        if runner is None:
            if dataset is None:
                raise ValueError("pass a dataset (task directory, Python tasks, repository rows) or a runner")
            runner = EpisodeRunner(dataset, **options)
        self.runner = runner

    def __call__(self) -> EvsysTrlEnvironment:
        """A new environment (TRL pools and resets them)."""
        return EvsysTrlEnvironment(self.runner)

    def dataset(self, tasks: Sequence[str] | None = None, repeats: int = 1) -> Any:
        """A Hugging Face `Dataset` with one row per task (`repeats` times each): an empty user message as
        `prompt` (the instruction is appended by `reset`) and the task's name as `task`."""
        from datasets import Dataset

        names = self.runner.require_tasks(list(tasks)) if tasks is not None else self.runner.task_names
        rows = [{"prompt": [{"role": "user", "content": ""}], "task": name} for name in names] * repeats
        return Dataset.from_list(rows)

    def close(self) -> None:
        """Release every sandbox and write the job's result.json."""
        self.runner.close()


def hermes_response_parsing(tokenizer: Any) -> Any:
    """Let TRL parse the tool calls of a model with evsys's Hermes/ChatML chat template (the tiny test models,
    models evsys gives that template): TRL knows Qwen's templates, whose tool-call format this one shares."""
    from trl.chat_template_utils import _SUPPORTS_RESPONSE_TEMPLATE, qwen3_schema, qwen3_template

    if tokenizer.chat_template != HERMES_CHATML_TEMPLATE:
        raise ValueError("the tokenizer's chat template is not evsys's Hermes/ChatML template")
    if _SUPPORTS_RESPONSE_TEMPLATE:
        tokenizer.response_template = qwen3_template
    else:
        tokenizer.response_schema = qwen3_schema
    return tokenizer
