"""`evsys serve` serves a multi-step (`[[steps]]`) task to OpenEnv's own client: reset gives the first step's
instruction, `submit` scores that step and answers with the next step's instruction, and the episode ends
after the last step with the trial's combined reward; the steps are recorded as `evsys run` records them."""

from __future__ import annotations

from pathlib import Path

import pytest
from openenv.core.generic_client import GenericEnvClient
from serve_process import start_serve, stop_serve

pytestmark = pytest.mark.slow

TOML = """[task]
name = "two-steps"
[agent]
timeout_sec = 120.0
[verifier]
timeout_sec = 60.0
[environment]
workdir = "/app"
network_mode = "no-network"

[[steps]]
name = "write"

[[steps]]
name = "append"
"""
# the task's test scores step 1 (its first line); step 2's own test wins for step 2 (both lines)
FIRST_LINE = (
    '#!/bin/bash\nif [ "$(head -n1 /app/notes.txt)" = one ]; then r=1; else r=0; fi\n'
    "echo $r > /logs/verifier/reward.txt\n"
)
BOTH_LINES = (
    '#!/bin/bash\nif [ "$(cat /app/notes.txt)" = "$(printf \'one\\ntwo\')" ]; then r=1; else r=0; fi\n'
    "echo $r > /logs/verifier/reward.txt\n"
)


def two_step_task(root: Path) -> Path:
    """A task of two steps in one sandbox: write 'one', then append 'two' to /app/notes.txt."""
    task = root / "two-steps"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(TOML)
    (task / "tests" / "test.sh").write_text(FIRST_LINE)
    for name, text in (("write", "Write the line 'one' to /app/notes.txt."), ("append", "Append 'two'.")):
        (task / "steps" / name).mkdir(parents=True)
        (task / "steps" / name / "instruction.md").write_text(text + "\n")
    (task / "steps" / "append" / "tests").mkdir()
    (task / "steps" / "append" / "tests" / "test.sh").write_text(BOTH_LINES)
    return task


@pytest.fixture(scope="module")
def steps_server(tmp_path_factory):
    """A server over the two-step task."""
    root = tmp_path_factory.mktemp("steps-task")
    served = start_serve(tmp_path_factory.mktemp("serve-steps"), dataset=two_step_task(root))
    yield served
    stop_serve(served)


def call(tool: str, **arguments) -> dict:
    """An OpenEnv call_tool action."""
    return {"type": "call_tool", "tool_name": tool, "arguments": arguments}


async def test_each_submit_scores_its_step_and_the_episode_ends_after_the_last(steps_server):
    async with GenericEnvClient(base_url=steps_server.url, message_timeout_s=120) as env:
        first = await env.reset(task="two-steps")
        assert first.observation["instruction"] == "Write the line 'one' to /app/notes.txt.\n"
        assert first.observation["metadata"]["task_step"] == "write"
        await env.step(call("bash", command="echo one > /app/notes.txt"))
        moved = await env.step(call("submit"))
        assert moved.done is False and moved.reward == 1.0  # step 1 scored
        assert moved.observation["instruction"] == "Append 'two'.\n"
        assert moved.observation["metadata"]["scored_step"] == "write"
        assert moved.observation["metadata"]["task_step"] == "append"
        await env.step(call("bash", command="echo wrong >> /app/notes.txt"))
        final = await env.step(call("submit"))
    assert final.done is True and final.reward == 0.5  # the mean of the steps: 1 and 0
    result = steps_server.trial_result(final.observation["metadata"]["trial_name"])
    assert [(s["name"], s["reward"]) for s in result["steps"]] == [("write", 1.0), ("append", 0.0)]
    assert result["failure"] is None and result["reward"] == 0.5


async def test_a_client_that_leaves_after_step_one_is_recorded_with_the_step_it_scored(steps_server):
    async with GenericEnvClient(base_url=steps_server.url, message_timeout_s=120) as env:
        await env.reset(task="two-steps")
        await env.step(call("write_file", path="/app/notes.txt", content="one\n"))
        moved = await env.step(call("submit"))
        trial = moved.observation["metadata"]["trial_name"]
    result = steps_server.trial_result(trial)  # the client left during step 2
    assert result["steps"][0]["reward"] == 1.0
    assert "before submit" in result["failure"]["message"]


def test_a_harness_server_refuses_a_multi_step_task_at_start(tmp_path: Path):
    from evsys.engine.episodes import TaskCatalog

    task = two_step_task(tmp_path / "tasks")
    job = TaskCatalog.job_config(task, job_name="h", jobs_dir=tmp_path / "jobs", harness="claude-code")
    with pytest.raises(ValueError, match="multi-step task cannot be served with --harness"):
        TaskCatalog.load(task, job)
    assert TaskCatalog.load(task, TaskCatalog.job_config(task, job_name="t", jobs_dir=tmp_path)).names == [
        "two-steps"
    ]
