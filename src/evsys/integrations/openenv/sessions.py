"""OpenEnv's `ResourceSessionFactory` over evsys tasks: every session is one evsys trial (an episode).

`EvsysSessionFactory(dataset)` serves a dataset's tasks through an `EpisodeRunner` (the serving state of
`evsys serve`); `create(task, seed, episode_id)` starts an episode of the task named by `task` (a task name,
or a row with a `task` field), else of the task at `seed`, and returns:

- an `EvsysSession` (the trainer or OpenEnv's harness adapter samples): `initial_messages()` is the task's
  instruction, `list_tools()` the episode's tools (the loop agent's `bash`, `read_file`, `write_file`,
  `str_replace`, `submit` and the task's MCP tools, or a Python task's own selection and custom tools, and
  `reply` for a task whose respond hook answers the model's turns), `call_tool()` runs one, `verify()`
  ends the episode and runs the task's verifier chain (its reward, under the runner's integrity policy, is
  `env_reward`; the findings are in `metrics["integrity"]`), `close()` releases the sandbox;
- with `harness=` (and `model=`), an `EvsysHarnessSession`, OpenEnv's `TrainableSession` for a harness that
  owns its loop: `wait_for_completion()` gives the harness the instruction and lets it work to the end of its
  turn, `fetch_training_trace()` returns the recording proxy's model calls (engine token ids, logprobs, loss
  mask) as a `TrainingTrace`.

Every session is recorded as a trial (result.json, trajectory.json) under the runner's job directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openenv.core.env_server.mcp_types import Tool
from openenv.core.harness import (
    RESERVED_TOOL_NAMES,
    Message,
    ResourceSession,
    ResourceSessionFactory,
    ToolResult,
    TrainingTrace,
    VerifyResult,
)

from evsys.engine.episodes.protocol import ServedObservation
from evsys.integrations.episodes import REPLY, EpisodeClient, EpisodeRunner
from evsys.integrations.openenv.trace import training_trace
from evsys.records import TrialResult


def mcp_tools(schemas: list[dict[str, Any]]) -> list[Tool]:
    """OpenAI-shape tool schemas in OpenEnv's MCP `Tool` shape."""
    specs = (s["function"] for s in schemas)
    return [Tool(name=f["name"], description=f["description"], input_schema=f["parameters"]) for f in specs]


class EvsysSession(ResourceSession):
    """One evsys episode as an OpenEnv resource session (the caller samples the model)."""

    def __init__(self, client: EpisodeClient, instruction: str, task: str | None) -> None:
        self.client = client
        self.instruction = instruction
        self.task = task
        self.closed = False
        self.tools = mcp_tools(client.tool_schemas())

    def initial_messages(self) -> list[Message]:
        """The task's instruction as the user message."""
        return [{"role": "user", "content": self.instruction}]

    def list_tools(self) -> list[Tool]:
        """The episode's tools, in MCP shape: the loop agent's (`bash`, `read_file`, `write_file`,
        `str_replace`, `submit`) and the task's MCP tools, or a Python task's own choice with its custom
        tools; then `reply` when its respond hook answers the model's turns."""
        return list(self.tools)

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Run one tool of the episode (`reply`: the model's turn, the respond hook's answer as the result);
        `submit`, the hook saying done or the step limit ends the episode and carries its reward in
        `metadata["reward"]` (under the integrity policy, as `verify()` gives it). Unknown tools raise
        `KeyError`, as OpenEnv expects."""
        if name in RESERVED_TOOL_NAMES or name not in {t.name for t in self.tools}:
            raise KeyError(f"Unknown tool: {name}")
        if not self.client.running:
            return ToolResult(done=True, error="the episode is over")
        if name == REPLY:
            return self._reply(dict(arguments))
        observation, _, done = self.client.tool(name, dict(arguments))
        return self._result(observation, done)

    def _reply(self, arguments: dict[str, Any]) -> ToolResult:
        """The model's turn to the respond hook; its answer is the result's data."""
        try:
            observation, _, done = self.client.reply(arguments)
        except ValueError as exc:
            return ToolResult(error=str(exc), metadata={"error_type": "invalid_args"})
        return self._result(observation, done, observation.text or "")

    def _result(self, observation: ServedObservation, done: bool, text: str | None = None) -> ToolResult:
        """A step's observation as OpenEnv's `ToolResult` (the reward once the episode is done)."""
        if observation.error is not None:
            return ToolResult(
                error=observation.error.message, metadata={"error_type": observation.error.error_type}
            )
        result = observation.result or {}
        metadata: dict[str, Any] = {
            "step": observation.metadata.get("step"),
            "is_error": result.get("is_error"),
        }
        if done:
            metadata["reward"] = self.client.judged().baseline_reward
        data = str(result.get("data", "")) if text is None else text
        return ToolResult(data=data, done=done, metadata=metadata)

    def verify(self, transcript: list[Message], final_state: Any | None = None) -> VerifyResult:
        """End the episode (if still running) and run the task's verifier chain: its reward under the
        runner's integrity policy (None when the trial ended before its verifier scored it, or was screened;
        0 for a failure the agent caused itself), per-key rewards, the failure, the integrity
        findings, the trial's name and directory."""
        result = self.client.finish()
        judged = self.client.judged()
        return VerifyResult(
            env_reward=judged.baseline_reward,
            done=True,
            metrics={
                "rewards": judged.rewards,
                "failure": _failure(result),
                "integrity": [f.model_dump(mode="json") for f in result.integrity],
                "screened": judged.screened,
            },
            artifacts={
                "trial_name": result.trial_name,
                "trial_dir": str(self.client.runner.job_dir / result.trial_name),
                "transcript_length": len(transcript),
            },
        )

    def close(self) -> None:
        """Release the session: a running episode ends (still verified and recorded), its sandbox is freed."""
        if not self.closed:
            self.closed = True
            self.client.close()


class EvsysHarnessSession(EvsysSession):
    """A harness episode: the harness owns the loop (OpenEnv's `TrainableSession`)."""

    def wait_for_completion(self, timeout_s: float | None = None) -> int:
        """Give the harness the instruction and wait until its turn ends and the trial is verified; 0 when the
        turn completed, 1 when it failed. `timeout_s` is the runner's step timeout (set on the factory)."""
        exit_code = 0
        if self.client.running:
            observation, _, _ = self.client.message(self.instruction)
            exit_code = 0 if observation.metadata.get("turn_status") == "ok" else 1
        self.client.finish()
        return exit_code

    def fetch_training_trace(self) -> TrainingTrace:
        """The recording proxy's model calls of this episode: engine prompt ids, completion ids, logprobs and
        loss mask per turn (see evsys.integrations.openenv.trace)."""
        result = self.client.finish()
        return training_trace(self.client.trajectory(), result.trial_name, task=self.task)


class EvsysSessionFactory(ResourceSessionFactory[EvsysSession]):
    """Sessions over one dataset's tasks. Keyword arguments are the `EpisodeRunner`'s (jobs_dir, sandbox,
    max_steps, step_timeout_sec, harness, model, ...), or pass a ready `runner`."""

    def __init__(self, dataset: Any = None, *, runner: EpisodeRunner | None = None, **options: Any) -> None:
        if runner is None:
            if dataset is None:
                raise ValueError("pass a dataset (task directory, Python tasks, repository rows) or a runner")
            runner = EpisodeRunner(dataset, **options)
        self.runner = runner

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> EvsysSession:
        """Start an episode of `task` (a task name, or a mapping with a `task` field; an unknown name is a
        ValueError naming the known ones), else of the task at `seed`; the sandbox is up when this returns."""
        name = self._task_name(task)
        client = self.runner.open("openenv")
        try:
            observation = client.start(name, seed=seed, episode_id=episode_id)
        except BaseException:
            client.close()
            raise
        kind = EvsysHarnessSession if self.runner.settings.harness is not None else EvsysSession
        return kind(client, observation.instruction or "", observation.task)

    def _task_name(self, task: Any) -> str | None:
        """The task's name (an unknown one is refused, naming the known ones); None: pick by `seed`."""
        if isinstance(task, Mapping):
            task = task.get("task")
        if isinstance(task, str):
            return self.runner.require_tasks([task])[0]
        return None

    def close(self) -> None:
        """Release every sandbox and write the job's result.json."""
        self.runner.close()


def _failure(result: TrialResult) -> str | None:
    return result.failure.message if result.failure is not None else None
