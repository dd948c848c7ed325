"""Each real harness as an `-a` agent in a real trial: install (cached), no-network sandbox, proxy, verifier.

The model is the long-context tiny model (it will not solve the task): the test is about the plumbing a user
relies on — the harness really called the model through the trial's proxy session, the trajectory holds those
calls with token ids, the verifier ran, and no harness process is left on the machine afterwards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness_episodes import harness_processes

from evsys.engine import Job
from evsys.engine.config import AgentSpec, JobConfig
from evsys.rollouts import BorrowedModelClient

EXAMPLES = Path(__file__).parents[2] / "examples" / "tasks"
ACP_HARNESSES = ("gemini-cli", "opencode", "openclaw")


@pytest.mark.parametrize("harness", ["claude-code", "codex", "mini-swe-agent", *ACP_HARNESSES])
async def test_harness_runs_a_trial_through_the_proxy(tmp_path, long_context_client, harness):
    config = JobConfig(
        datasets=[EXAMPLES],
        agents=[AgentSpec(name=harness, model="tiny", kwargs={"max_tokens_cap": 24})],
        task_names=["create-file"],
        jobs_dir=tmp_path,
        job_name=harness,
        # OpenClaw starts its Gateway (about 30-60 s here) within the task's 60 s agent timeout
        agent_timeout_multiplier=5.0 if harness == "openclaw" else 1.0,
    )
    events: list[dict] = []
    job = Job(
        config,
        model_client_factory=lambda _spec: BorrowedModelClient(long_context_client),
        on_agent_event=events.append,
    )
    (trial,) = (await job.run()).trials
    assert trial.failure is None, trial.failure
    assert trial.reward is not None  # the verifier ran
    trial_dir = job.store.trial_dir(trial.trial_name)
    steps = json.loads((trial_dir / "trajectory.json").read_text())["steps"]
    agent_steps = [s for s in steps if s["source"] == "agent"]
    assert agent_steps, "the harness made no model call through the proxy"
    assert all(s["metrics"]["prompt_token_ids"] and s["metrics"]["completion_token_ids"] for s in agent_steps)
    assert trial.agent_metadata["model_calls"] == len(agent_steps)
    assert [e["type"] for e in events if e["type"] != "phase"][-1] == "turn_complete"
    assert harness_processes() == []
    if harness in ACP_HARNESSES:  # their ACP session updates, as ATIF beside the proxy's view
        native = json.loads((trial_dir / "agent" / "native-trajectory.json").read_text())["steps"]
        assert native[0]["source"] == "user" and any(s["source"] == "agent" for s in native)


async def test_gemini_cli_runs_a_trial_on_a_local_model_named_by_its_path(tmp_path, long_context_client):
    """`-a gemini-cli -m local:<path>`: the CLI puts the model name, `/` and `:` and all, in its request path
    (`/v1beta/models/local:/.../<dir>:streamGenerateContent`); the proxy routes it to the trial's session
    (a 404 before the route took slashes) and the job's own client for that path answers."""
    model = f"local:{long_context_client.shared.model}"
    assert "/" in model.removeprefix("local:")
    config = JobConfig(
        datasets=[EXAMPLES],
        agents=[AgentSpec(name="gemini-cli", model=model, kwargs={"max_tokens_cap": 24})],
        task_names=["create-file"],
        jobs_dir=tmp_path,
        job_name="gemini-local-path",
    )
    job = Job(config)
    (trial,) = (await job.run()).trials
    assert trial.failure is None, trial.failure
    assert trial.reward is not None  # the verifier ran
    steps = json.loads((job.store.trial_dir(trial.trial_name) / "trajectory.json").read_text())["steps"]
    agent_steps = [s for s in steps if s["source"] == "agent"]
    assert agent_steps, "Gemini CLI made no model call through the proxy"
    assert all(s["metrics"]["prompt_token_ids"] and s["metrics"]["completion_token_ids"] for s in agent_steps)
    assert {s.get("model_name") for s in agent_steps} == {model}
    assert harness_processes() == []
