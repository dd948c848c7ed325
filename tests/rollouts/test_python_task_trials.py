"""Python tasks run through the one `Trial`: sandboxed ones keep /logs and their system prompt, a sandbox
failure while killing the agent's processes is recorded, and every file goes through the JobStore."""

from __future__ import annotations

import json
from pathlib import Path

from evsys.engine import AgentSpec, JobConfig, JobStore, TaskRef, TrialSpec, run_trial
from evsys.engine.config import TrialConfig
from evsys.engine.run import TrialResources
from evsys.rollouts import run_rollouts
from evsys.sandbox.base import SandboxError
from evsys.task.python import VerifiedTask


def _trial_dir(root: Path, task_id: str) -> Path:
    [result] = root.glob(f"*/{task_id}__*/result.json")
    return result.parent


async def test_a_sandboxed_python_task_keeps_its_logs_and_artifacts(
    tmp_path: Path, math_client, fresh_verifier
):
    item = VerifiedTask(id="logs", prompt="say 42", verifier=fresh_verifier(lambda c: 1.0), sandbox=True)
    [group] = await run_rollouts(
        [item], model=math_client, agent="rollout_agents:LogWritingAgent", jobs_dir=tmp_path, max_retries=0
    )
    assert group.trajectories[0].error is None and group.trajectories[0].reward == 1.0
    trial_dir = _trial_dir(tmp_path, "logs")
    assert (trial_dir / "agent" / "note.txt").read_text() == "agent-note\n"
    assert (trial_dir / "artifacts" / "made.txt").read_text() == "made\n"


async def test_a_sandboxed_python_task_honours_its_system_prompt(tmp_path: Path, math_client, fresh_verifier):
    item = VerifiedTask(
        id="sys",
        prompt="What is 19+23?",
        system_prompt="You are a calculator.",
        verifier=fresh_verifier(lambda c: 0.0),
        sandbox=True,
    )
    [group] = await run_rollouts(
        [item], model=math_client, max_turns=1, max_tokens=8, jobs_dir=tmp_path, max_retries=0
    )
    steps = group.trajectories[0].trajectory.steps
    assert (steps[0].source, steps[0].message) == ("system", "You are a calculator.")
    tools = [t["function"]["name"] for t in group.trajectories[0].trajectory.agent.tool_definitions]
    assert "bash" in tools  # the loop agent records its own tools, no special case in the engine


async def test_a_sandbox_error_while_killing_the_agent_is_recorded(
    tmp_path: Path, math_client, fresh_verifier, monkeypatch
):
    from evsys.sandbox.local.sandbox import LocalSandbox

    calls = []

    async def broken_kill(self) -> None:
        calls.append(self)
        raise SandboxError("the exec daemon went away")

    monkeypatch.setattr(LocalSandbox, "kill_processes", broken_kill)
    item = VerifiedTask(id="kill", prompt="say 42", verifier=fresh_verifier(lambda c: 1.0), sandbox=True)
    # only an agent that did not finish normally has its processes killed before verification
    agent = "rollout_agents:FailingLogWritingAgent"
    [group] = await run_rollouts([item], model=math_client, agent=agent, jobs_dir=tmp_path, max_retries=0)
    assert calls, "the broken kill_processes must have run"
    result = json.loads((_trial_dir(tmp_path, "kill") / "result.json").read_text())
    assert result["failure"]["cause"] == "agent_error"
    assert (
        "could not kill the agent's processes: SandboxError: the exec daemon went away"
        in (result["failure"]["message"])
    )
    assert group.trajectories[0].error is not None


class RecordingStore(JobStore):
    """A JobStore that remembers every path written through it."""

    def __init__(self, job_dir: Path) -> None:
        super().__init__(job_dir)
        self.written: set[Path] = set()

    async def start_trial(self, config) -> Path:
        self.written.add(self.trial_dir(config.trial_name) / "config.json")
        return await super().start_trial(config)

    async def finish_trial(self, trajectory, result) -> None:
        self.written.add(self.trial_dir(result.trial_name) / "trajectory.json")
        self.written.add(self.trial_dir(result.trial_name) / "result.json")
        await super().finish_trial(trajectory, result)

    async def write_trial_file(self, trial_name, relpath, content) -> None:
        self.written.add(self.trial_dir(trial_name) / relpath)
        await super().write_trial_file(trial_name, relpath, content)


async def test_a_single_turn_trial_writes_every_file_through_the_job_store(tmp_path: Path, math_client):
    task = VerifiedTask(id="q", prompt="What is 19+23?", verifier="rollout_agents:says_42")
    job = JobConfig(datasets=[tmp_path], job_name="store", jobs_dir=tmp_path)
    config = TrialConfig(
        trial_name="q__loop__1",
        task_name="q",
        task_path=tmp_path,
        dataset="ds",
        agent=AgentSpec(name="loop", model="local", kwargs={"max_tokens": 8, "temperature": 0}),
        attempt=1,
    )
    spec = TrialSpec.for_job(job, config, TaskRef.python(task, tmp_path), None)
    store = RecordingStore(tmp_path / "store")
    result = await run_trial(spec, store, TrialResources(model_client=math_client))
    assert result.failure is None and result.reward == 1.0
    files = {p for p in store.trial_dir("q__loop__1").rglob("*") if p.is_file()}
    assert files and files == store.written
    assert json.loads((store.trial_dir("q__loop__1") / "verifier" / "reward.json").read_text()) == {
        "reward": 1.0
    }
