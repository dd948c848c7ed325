"""The loop agent uses a task's own MCP server: `mcp-facts` ships a stdio MCP server (standard library only)
that the loop agent starts inside the trial's no-network sandbox; its tool is offered to the model beside the
built-in ones, the model calls it, and the server's answer comes back as the observation."""

from __future__ import annotations

import json
import shutil

import pytest
from mcp_facts import ANSWER, TASK_DIR, TOOL_NAME, TOOL_SCHEMA, mcp_recipe

from evsys.engine import Job
from evsys.engine.config import AgentSpec, JobConfig
from evsys.model.local.client import LocalModelClient
from evsys.rollouts import BorrowedModelClient
from evsys.testing.tiny_model import build_tiny_model

pytestmark = pytest.mark.timeout(1200)  # the scripted model trains once (cached) on 2 busy cores


@pytest.fixture(scope="module")
def mcp_client() -> LocalModelClient:
    """The tiny model scripted to call the task's tool."""
    return LocalModelClient(str(build_tiny_model(mcp_recipe())))


@pytest.mark.needs_model
async def test_the_loop_agent_lists_and_calls_the_tasks_mcp_tool(tmp_path, mcp_client):
    """The tool is offered under `mcp__facts__lookup_fact`, called with the model's arguments inside the
    sandbox (the server logs the call, which the task's test reads: reward 1), and answered."""
    config = JobConfig(
        datasets=[TASK_DIR],
        agents=[AgentSpec(name="loop", model="tiny", kwargs={"temperature": 0, "max_turns": 3})],
        jobs_dir=tmp_path / "jobs",
        job_name="loop-mcp",
        n_concurrent=1,
    )
    job = Job(config, model_client_factory=lambda _spec: BorrowedModelClient(mcp_client))
    (trial,) = (await job.run()).trials
    assert trial.failure is None, trial.failure
    trajectory = json.loads((job.store.trial_dir(trial.trial_name) / "trajectory.json").read_text())
    assert TOOL_SCHEMA in trajectory["agent"]["tool_definitions"]
    assert trial.agent_metadata["mcp_tools"] == [TOOL_NAME]
    first = next(s for s in trajectory["steps"] if s["source"] == "agent")
    assert [c["function_name"] for c in first["tool_calls"]] == [TOOL_NAME]
    assert first["tool_calls"][0]["arguments"] == {"topic": "kumquat"}
    assert first["observation"]["results"][0]["content"] == ANSWER
    assert trial.reward == 1.0  # the server, inside the sandbox, logged the call the test looks for


@pytest.mark.needs_model
async def test_a_server_that_cannot_start_fails_the_trial_with_its_stderr(tmp_path, mcp_client):
    """A stdio server whose command fails: the trial fails with agent_error naming the server and its
    stderr (positive control: the same task with the right command runs, above)."""
    task = tmp_path / "broken-mcp"
    shutil.copytree(TASK_DIR, task)
    toml = (
        (TASK_DIR / "task.toml").read_text().replace('"/opt/facts/facts_server.py"', '"/opt/facts/none.py"')
    )
    (task / "task.toml").write_text(toml.replace('name = "mcp-facts"', 'name = "broken-mcp"'))
    config = JobConfig(
        datasets=[task],
        agents=[AgentSpec(name="loop", model="tiny", kwargs={"temperature": 0, "max_turns": 1})],
        jobs_dir=tmp_path / "jobs",
        job_name="loop-mcp-broken",
        n_concurrent=1,
    )
    job = Job(config, model_client_factory=lambda _spec: BorrowedModelClient(mcp_client))
    (trial,) = (await job.run()).trials
    assert trial.failure is not None and trial.failure.cause == "agent_error"
    assert "task MCP server 'facts'" in trial.failure.message and "none.py" in trial.failure.message
