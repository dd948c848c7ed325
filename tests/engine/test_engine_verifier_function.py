"""`[verifier] function` in task.toml: a rubric scores host-side on top of the test script's rewards."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_tasks import make_task

from evsys.engine import AgentSpec, Job, JobConfig
from evsys.records import FailureCause

# Gate on the script's reward, then weigh it with a second (fixed) criterion: oracle 0.5*1 + 0.5*0.5 = 0.75,
# nop 0.5*0 + 0.5*0.5 = 0.25 — a score the script alone never produces.
RUBRIC = """
from evsys.verify.rubric import Gate, RewardKey, Rubric, RubricVerifier, WeightedSum


class Tidy(Rubric):
    def forward(self, action, observation):
        return 0.5


verifier = RubricVerifier(WeightedSum({"tests": Gate(RewardKey("reward"), 1.0), "tidy": Tidy()}, [0.5, 0.5]))
"""


def _task(root: Path, name: str, function: str) -> Path:
    toml = (
        f'[task]\nname = "{name}"\n[agent]\ntimeout_sec = 60\n'
        f'[verifier]\ntimeout_sec = 60\nfunction = "{function}"\n[environment]\nworkdir = "/app"\n'
        'network_mode = "no-network"\n'
    )
    task = make_task(root, name, toml=toml)
    (task / "tests" / "rubric.py").write_text(RUBRIC)
    return task


@pytest.mark.needs_sandbox
async def test_rubric_gates_the_script_reward_and_weighs_another_criterion(tmp_path):
    dataset = tmp_path / "dataset"
    _task(dataset, "rubric", "tests/rubric.py:verifier")
    _task(dataset, "broken", "tests/rubric.py:no_such_function")
    config = JobConfig(
        datasets=[dataset],
        agents=[AgentSpec(name="oracle"), AgentSpec(name="nop")],
        jobs_dir=tmp_path / "jobs",
        job_name="fn",
    )
    result = await Job(config).run()
    got = {(t.task_name, t.agent): t for t in result.trials}
    oracle, nop = got["rubric", "oracle"], got["rubric", "nop"]
    assert oracle.failure is None and oracle.reward == 0.75
    assert oracle.rewards["tests"] == 1.0 and oracle.rewards["tidy"] == 0.5
    assert nop.reward == 0.25
    assert (tmp_path / "jobs" / "fn" / oracle.trial_name / "verifier" / "function-reward.json").is_file()
    broken = got["broken", "oracle"]
    assert broken.failure.cause == FailureCause.VERIFIER_ERROR
    message = broken.failure.message
    assert "task.toml:verifier.function" in message and "no_such_function" in message
    assert broken.reward is None
