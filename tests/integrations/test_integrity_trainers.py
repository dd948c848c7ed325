"""The integrity option in the trainer integrations: TRL's environment and rollout function, and the Tinker
cookbook's envs, hand a trainer the reward of a trial with findings as the policy says (zero, screen, flag),
and a failure the agent caused itself as a wrong answer."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from evsys.integrations.episodes import EpisodeRunner
from evsys.records import FailureCause, IntegrityFinding, RolloutError, RolloutTrajectory
from evsys.rollouts import save_tasks
from evsys.task.python import VerifiedTask
from evsys.verify.base import VerifierResult
from evsys.verify.functions import register_verifier, unregister_verifier

FORGED = IntegrityFinding(kind="canary_failed", evidence="test_calc.py::test_sub_2 passed", source="repo")
VERIFIER = "integrity-trainers-forged"


@pytest.fixture
def forged_task(tmp_path: Path):
    """A Python task whose verifier scores every answer 1.0 and reports a finding (a forgery it saw)."""
    register_verifier(
        VERIFIER, lambda completion: VerifierResult(rewards={"reward": 1.0}, integrity=[FORGED])
    )
    task = VerifiedTask(id="forged", prompt="What is 6*7?", verifier=VERIFIER)
    yield task, save_tasks([task], tmp_path / "tasks")
    unregister_verifier(VERIFIER)


@pytest.mark.needs_sandbox
def test_trl_environment_reward_follows_the_runners_policy(forged_task, tmp_path: Path) -> None:
    from evsys.integrations.trl import EnvironmentFactory

    _, dataset = forged_task
    rewards = {}
    for policy in ("zero", "screen", "flag"):
        factory = EnvironmentFactory(dataset, jobs_dir=tmp_path, job_name=f"trl-{policy}", integrity=policy)
        try:
            env = factory()
            env.reset(task="forged")
            rewards[policy] = env.get_reward()
            assert env.result is not None and env.result.reward == 1.0  # the verifier's own score
            assert env.result.integrity == [FORGED]
        finally:
            factory.close()
    assert rewards == {"zero": 0.0, "screen": None, "flag": 1.0}


def test_an_unknown_policy_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="integrity must be one of"):
        EpisodeRunner(tmp_path / "nowhere", integrity="drop")


def test_trl_rollout_func_leaves_screened_samples_out_and_counts_exhaustion_as_zero() -> None:
    from evsys.integrations.trl.rollout import _append

    tokenizer = SimpleNamespace(encode=lambda text: [7, 8], eos_token_id=0)
    tokens = {
        "prompt_token_ids": [1],
        "completion_token_ids": [2, 3],
        "loss_mask": [1, 1],
        "logprobs": [0, 0],
    }
    exhausted = RolloutError(cause=FailureCause.AGENT_EXHAUSTED_RESOURCES, message="oom_kill 1")
    samples = [
        RolloutTrajectory(trial_name="honest", task_id="t", attempt=1, reward=1.0, **tokens),
        RolloutTrajectory(trial_name="screened", task_id="t", attempt=2, reward=1.0, screened=True, **tokens),
        RolloutTrajectory(trial_name="exhausted", task_id="t", attempt=3, error=exhausted, **tokens),
        RolloutTrajectory(trial_name="errored", task_id="t", attempt=4, error=exhausted.model_copy(
            update={"cause": FailureCause.SANDBOX_FAILED})),
    ]  # fmt: skip
    out: dict[str, list] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask")}
    out |= {"evsys_reward": [], "evsys_trial": []}
    for sample in samples:
        _append(out, sample, "What is 6*7?", tokenizer)
    assert out["evsys_reward"] == [1.0, None, 0.0, None]  # None: TRL leaves it out of the baseline
    assert out["env_mask"] == [[1, 1], [0], [1, 1], [0]]  # a screened sample is not trained on


@pytest.mark.needs_sandbox
async def test_tinker_envs_zero_or_flag_a_forged_reward(forged_task, tmp_path: Path) -> None:
    pytest.importorskip("tinker_cookbook.rl.rollouts", reason="tinker-cookbook is not installed")
    from test_tinker_envs import RENDERER, ScriptedPolicy
    from tinker_cookbook.rl.rollouts import do_group_rollout

    from evsys.integrations.tinker import EvsysRLDataset
    from evsys.testing.tiny_model import DEMO_RECIPE, build_tiny_model

    task, _ = forged_task
    model_dir = build_tiny_model(DEMO_RECIPE)
    with pytest.raises(ValueError, match="integrity='screen'"):
        await EvsysRLDataset.create(
            [task], model_name=str(model_dir), renderer_name=RENDERER, integrity="screen"
        )
    got = {}
    for policy in ("zero", "flag"):
        dataset = await EvsysRLDataset.create(
            [task], model_name=str(model_dir), renderer_name=RENDERER, group_size=1, jobs_dir=tmp_path,
            job_name=f"tinker-{policy}", integrity=policy,
        )  # fmt: skip
        async with dataset:
            [builder] = dataset.get_batch(0)
            group = await do_group_rollout(builder, ScriptedPolicy(model_dir, ["42"]))
        metrics = group.trajectories_G[0].transitions[-1].metrics
        got[policy] = (group.get_total_rewards(), metrics["evsys/integrity_findings"])
    assert got == {"zero": ([0.0], 1.0), "flag": ([1.0], 1.0)}
