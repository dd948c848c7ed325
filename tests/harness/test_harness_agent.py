"""Harnesses as `-a` agents in real trials: HarnessAgent in the Job engine, the tiny harness in a sandbox.

The tiny harness (tests/harness/tiny_harness.py) is bound into each trial's no-network sandbox; its model
calls go through the trial's proxy session to the tiny model. Misbehaving modes show the failure causes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evsys.agent.harness.agent import EVENTS_FILE
from evsys.engine import Job
from evsys.engine.config import AgentSpec, JobConfig
from evsys.rollouts import BorrowedModelClient
from evsys.testing.tiny_model import DEMO_RECIPE, build_tiny_model

EXAMPLES = Path(__file__).parents[2] / "examples" / "tasks"


async def run_job(tmp_path: Path, agent: str, client, events: list | None = None):
    config = JobConfig(
        datasets=[EXAMPLES],
        agents=[AgentSpec(name=agent, model="tiny")],
        task_names=["create-file"],
        jobs_dir=tmp_path / "jobs",
        job_name=agent,
        n_concurrent=1,
    )
    job = Job(
        config,
        model_client_factory=lambda _spec: BorrowedModelClient(client),
        on_agent_event=events.append if events is not None else None,
    )
    result = await job.run()
    (trial,) = result.trials
    return job, trial


async def test_a_harness_runs_as_an_agent_with_its_calls_in_the_trajectory(
    tmp_path, tiny_engine_client, tiny_agent
):
    """One turn in the trial's sandbox: the verifier runs, the trajectory holds the proxy's calls with token
    ids, events are streamed live and saved, and nothing of the harness survives."""
    events: list[dict] = []
    job, trial = await run_job(tmp_path, tiny_agent("tiny-ok", "--no-tools"), tiny_engine_client, events)
    assert trial.failure is None, trial.failure
    assert trial.reward is not None  # the verifier ran (the tiny model does not solve the task)
    trial_dir = job.store.trial_dir(trial.trial_name)
    trajectory = json.loads((trial_dir / "trajectory.json").read_text())
    agent_steps = [s for s in trajectory["steps"] if s["source"] == "agent"]
    assert agent_steps and agent_steps[0]["metrics"]["completion_token_ids"]
    assert trial.agent_metadata["model_calls"] == len(agent_steps)
    assert {e["data"]["phase"] for e in events if e["type"] == "phase"} >= {"agent_run", "verifier"}
    events = [e for e in events if e["type"] != "phase"]  # the harness's own, as agent/ keeps them
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "turn_complete" and "llm_response" in kinds
    assert all(e["trial"] == trial.trial_name and e["harness"] == "tiny-ok" for e in events)
    saved = (trial_dir / "agent" / EVENTS_FILE).read_text().splitlines()
    assert [json.loads(line)["type"] for line in saved] == kinds


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("crash", "exited with code 3 before it was ready"),
        ("garbage", "expected a JSON event line"),
        ("hang", "ran past the session timeout of 2 s"),
    ],
)
async def test_a_misbehaving_harness_fails_the_trial_with_a_clear_cause(
    tmp_path, tiny_engine_client, tiny_agent, mode, expected
):
    """Crash at start, garbage instead of the protocol, a hang past the session timeout: each is recorded as
    agent_error with the reason, the verifier still runs, the sandbox is torn down, and the trajectory still
    holds the instruction the harness was given (it made no model call)."""
    name = tiny_agent(f"tiny-{mode}", "--mode", mode, session_timeout_s=2)
    job, trial = await run_job(tmp_path, name, tiny_engine_client)
    assert trial.failure is not None and trial.failure.cause == "agent_error"
    assert expected in trial.failure.message
    assert trial.sandbox_name and trial.timing.sandbox_stop is not None
    trajectory = json.loads((job.store.trial_dir(trial.trial_name) / "trajectory.json").read_text())
    instruction = (EXAMPLES / "create-file" / "instruction.md").read_text()
    assert [(s["source"], s["message"]) for s in trajectory["steps"]] == [("user", instruction)]


async def test_a_harness_agent_without_a_model_says_so(tmp_path, tiny_agent):
    """-a <harness> without -m fails the trial with a message naming the fix."""
    name = tiny_agent("tiny-nomodel")
    config = JobConfig(
        datasets=[EXAMPLES],
        agents=[AgentSpec(name=name)],
        task_names=["create-file"],
        jobs_dir=tmp_path / "jobs",
        job_name="nomodel",
    )
    result = await Job(config).run()
    (trial,) = result.trials
    assert trial.failure is not None and "needs a model: pass -m" in trial.failure.message


@pytest.mark.needs_sandbox
def test_evsys_run_stream_prints_harness_events_live(tmp_path):
    """`evsys run ... --stream` prints one line per harness event (model call, response, turn end), between
    the trial's phases (sandbox start before them, the verifier after)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}  # this tree
    args = [sys.executable, "-m", "evsys.cli.main", "run", str(EXAMPLES), "--task", "create-file"]
    args += ["-a", "stream_agents:TinyHarnessAgent", "-m", f"local:{build_tiny_model(DEMO_RECIPE)}"]
    args += ["--jobs-dir", str(tmp_path), "--job-name", "streamed", "--stream"]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "create-file__" in line]
    phases = [" ".join(line.split()[2:]) for line in lines if line.split()[1] == "phase"]
    harness = [line for line in lines if line.split()[1] != "phase"]
    kinds = [line.split()[1] for line in harness]
    assert kinds[0] == "llm_request" and "llm_response" in kinds and kinds[-1] == "turn_complete"
    assert "turn_complete ok" in " ".join(harness[-1].split())
    assert lines.index(harness[0]) > lines.index(next(x for x in lines if x.endswith("sandbox start")))
    assert phases.index("agent") < phases.index("verifier")
    assert lines.index(harness[-1]) < lines.index(next(x for x in lines if x.endswith("verifier")))


async def test_the_tools_a_harness_offered_are_the_trajectorys_tool_definitions(
    tmp_path, tiny_engine_client, tiny_agent
):
    """The proxy saw the harness offer its bash tool: trajectory.json lists it (SFT/ATIF exports read it)."""
    from tiny_harness import BASH_TOOL

    job, trial = await run_job(tmp_path, tiny_agent("tiny-tools"), tiny_engine_client)
    assert trial.failure is None, trial.failure
    trajectory = json.loads((job.store.trial_dir(trial.trial_name) / "trajectory.json").read_text())
    assert trajectory["agent"]["tool_definitions"] == [BASH_TOOL]


async def test_max_turns_ends_a_harness_trial_normally_after_that_many_model_calls(
    tmp_path, tiny_engine_client, tiny_agent
):
    """`--max-turns 1`: the proxy refuses the harness's second call; the trial ends as if the harness had
    stopped (no failure, verified), with its one call in the trajectory. Without the limit the same harness
    makes more calls (the positive control)."""
    name = tiny_agent("tiny-many-calls", "--mode", "retry-compact", "--no-tools")
    _, free = await run_job(tmp_path / "free", name, tiny_engine_client)
    assert free.agent_metadata["model_calls"] > 1
    config = JobConfig(
        datasets=[EXAMPLES],
        agents=[AgentSpec(name=name, model="tiny", kwargs={"max_turns": 1, "temperature": 0.0})],
        task_names=["create-file"],
        jobs_dir=tmp_path / "jobs",
        job_name="limited",
    )
    job = Job(config, model_client_factory=lambda _spec: BorrowedModelClient(tiny_engine_client))
    (trial,) = (await job.run()).trials
    assert trial.failure is None, trial.failure
    assert trial.reward is not None  # verified as usual
    assert trial.agent_metadata["model_calls"] == 1 and trial.agent_metadata["stop_reason"] == "max_turns"
