"""`GRPOTrainer(environment_factory=...)` over evsys tasks: one evsys episode (a sandboxed trial) per rollout.

TRL creates environment instances with a zero-argument factory, calls `reset(**row)` with each dataset row
(the returned text is appended to the row's last user message), exposes every other public method as a tool
(schema from its type hints and docstring) and, once the rollout's tool loop ends, calls `get_reward()`.

`reset` starts an episode of the row's `task` (a task name of the runner's dataset: a task directory, a
directory of tasks, Python tasks or repository rows) and returns its instruction; the tools are the task's:
the loop agent's (`bash`, `read_file`, `write_file`, `str_replace`), run in the episode's sandbox as the
task's agent user, or a Python task's own selection with its custom tools (run host-side, arguments
validated) and `reply`, whose result is the task's respond hook's answer (evsys.integrations.trl.tools);
`get_reward` ends the episode, runs the task's verifier chain (the trial's own verifier path) and returns its
reward under the runner's integrity policy (`EnvironmentFactory(..., integrity="zero" | "screen" |
"flag")`). Every episode is recorded as a trial under the runner's job directory.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from evsys.integrations.episodes import REPLY, EpisodeClient, EpisodeRunner
from evsys.integrations.trl.tools import DEFAULT_SCHEMAS, task_tool_schemas, tool_method
from evsys.model.render import HERMES_CHATML_TEMPLATE
from evsys.records import TrialResult

EPISODE_OVER = "The episode is over: no more tool calls run."


class TrlEpisode:
    """One rollout's environment: an evsys episode of the row's task. The tools TRL exposes are its
    subclass's public methods: `EvsysTrlEnvironment`'s built-in ones, or the ones `EnvironmentFactory` makes
    for tasks that choose their own (evsys.integrations.trl.tools)."""

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

    def _tool(self, name: str, arguments: dict[str, Any]) -> str:
        """One tool call in the episode (`reply`: the model's turn, answered by the task's respond hook)."""
        if self._client is None or not self._client.running:
            return EPISODE_OVER
        if name == REPLY:
            return self._reply(arguments)
        observation, _, done = self._client.tool(name, arguments)
        if observation.error is not None:
            return _error(observation.error.message)
        text = str((observation.result or {}).get("data", ""))
        return f"{text}\n{EPISODE_OVER}" if done else text

    def _reply(self, arguments: dict[str, Any]) -> str:
        """The model's message to the environment; the respond hook's answer (the episode over once it is
        done)."""
        assert self._client is not None
        try:
            observation, _, done = self._client.reply(arguments)
        except ValueError as exc:
            return _error(str(exc))
        if observation.error is not None:
            return _error(observation.error.message)
        return "\n".join(t for t in (observation.text, EPISODE_OVER if done else None) if t)

    def get_reward(self) -> float | None:
        """End the episode, run the task's verifier chain and return its reward under the runner's integrity
        policy; None when the trial failed before its verifier could score it, or was screened for its
        integrity findings (TRL leaves it out of the group's baseline). A failure the agent caused
        itself (`agent_exhausted_resources`) is 0, a wrong answer. The sandbox is released either way."""
        if self._client is None:
            return None
        self.result = self._client.finish()
        return self._client.judged().baseline_reward


def environment_class(schemas: Sequence[dict[str, Any]]) -> type[TrlEpisode]:
    """The environment class whose public methods are exactly these tools (named `EvsysTrlEnvironment`, so
    TRL logs its reward under the same name)."""
    if list(schemas) == DEFAULT_SCHEMAS:
        return EvsysTrlEnvironment
    methods = {s["function"]["name"]: tool_method(s) for s in schemas}
    doc = f"An evsys episode offering {', '.join(methods) or 'no tools'}."
    return type("EvsysTrlEnvironment", (TrlEpisode,), {"__module__": __name__, "__doc__": doc, **methods})


class EvsysTrlEnvironment(TrlEpisode):
    """One rollout's environment for tasks that name no tools: the loop agent's `bash`, `read_file`,
    `write_file` and `str_replace`, run in the episode's sandbox. Public methods are TRL tools."""

    bash = tool_method(DEFAULT_SCHEMAS[0])
    read_file = tool_method(DEFAULT_SCHEMAS[1])
    write_file = tool_method(DEFAULT_SCHEMAS[2])
    str_replace = tool_method(DEFAULT_SCHEMAS[3])


def dataset_tool_schemas(runner: EpisodeRunner) -> list[dict[str, Any]]:
    """The tools every task of the runner's dataset offers through TRL; ValueError when two tasks differ
    (TRL gives one environment class one set of tools)."""
    found: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    for served in runner.service.catalog.tasks:
        schemas = task_tool_schemas(served.task)
        found.setdefault(json.dumps(schemas, sort_keys=True), (served.name, schemas))
    if len(found) > 1:
        (first, a), (second, b) = list(found.values())[:2]
        raise ValueError(
            f"the dataset's tasks offer different tools ({first}: {_names(a)}; {second}: {_names(b)}): TRL's "
            "environment_factory gives every task one set; serve each set as its own dataset"
        )
    return next(iter(found.values()))[1]


def _error(message: str) -> str:
    """A refused call's text for the model: `Error: <why>` (once, whatever the message starts with)."""
    return f"Error: {message.removeprefix('error: ')}"


def _names(schemas: list[dict[str, Any]]) -> str:
    return ", ".join(s["function"]["name"] for s in schemas) or "none"


class EnvironmentFactory:
    """The zero-argument factory TRL's `environment_factory` takes, over one `EpisodeRunner`.

    `EnvironmentFactory("examples/tasks", jobs_dir="jobs")` serves the dataset's tasks; keyword arguments
    are the runner's (sandbox backend, step limit, job name, ...). Its environments offer the tools the
    tasks offer (`environment_class`): the sandbox tools, or a Python task's own choice, its custom tools
    and `reply` for its respond hook; tasks offering different tools are refused. `dataset()` gives a
    training dataset of its tasks (an unknown task name is refused, naming the known ones); `close()` (also
    run at exit, before the interpreter's thread pools stop) releases every sandbox and writes the job's
    result.json.
    """

    def __init__(self, dataset: Any = None, *, runner: EpisodeRunner | None = None, **options: Any) -> None:
        if runner is None:
            if dataset is None:
                raise ValueError("pass a dataset (task directory, Python tasks, repository rows) or a runner")
            runner = EpisodeRunner(dataset, **options)
        self.runner = runner
        try:
            self.environment_class = environment_class(dataset_tool_schemas(runner))
        except ValueError:
            if dataset is not None:
                runner.close()
            raise

    def __call__(self) -> TrlEpisode:
        """A new environment offering the dataset's tools (TRL pools and resets them)."""
        return self.environment_class(self.runner)

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
