"""TRL's GRPOTrainer trains a tiny model with `rollout_func=EvsysRolloutFunc(...)`: evsys owns the loop
(`run_rollouts` with the loop agent on the local engine), TRL gets evsys's recorded token ids and logprobs and
the verifier's rewards."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl", reason="TRL is not installed (pip install 'evsys[trl]')")

from trl_grpo import changed, grpo_config, weights

from evsys.integrations.trl import EvsysRolloutFunc, evsys_reward
from evsys.records import Trajectory, TrialResult
from evsys.repo.rows import RepoTask
from evsys.task.python import VerifiedTask
from evsys.testing.tiny_model import DEMO_GREETING, DEMO_GREETING_REPLY, DEMO_RECIPE, build_tiny_model
from evsys.trajectory.groups import flatten_tokens
from evsys.verify.functions import verifier

EXPECTED = DEMO_GREETING_REPLY["content"]
# The tiny model is sure of its greeting at temperature 1; at 1.5 about a third of the samples are exact and
# the rest score along the way, so a group of 8 (evsys samples with fresh randomness) all but never ties.
TEMPERATURE = 1.5
GROUP = 8


@verifier("trl_test_greeting_prefix", replace=True)
def greeting_prefix(completion: str) -> float:
    """Partial credit: how much of the expected greeting the completion starts with."""
    matched = 0
    for got, want in zip(completion, EXPECTED, strict=False):
        if got != want:
            break
        matched += 1
    return matched / len(EXPECTED)


def test_refuses_a_prompt_that_is_no_task() -> None:
    rollout = EvsysRolloutFunc(
        [VerifiedTask(id="hello", prompt="Say hello.", verifier="trl_test_greeting_prefix")], model="local"
    )

    class Trainer:
        class state:
            global_step = 0

    with pytest.raises(KeyError, match="no task"):
        rollout(["Say goodbye."] * 2, Trainer())


def test_its_dataset_holds_the_prompts_of_python_tasks_and_repository_rows() -> None:
    row = RepoTask(
        instance_id="o__r-1",
        repo="o/r",
        base_commit="0" * 40,
        FAIL_TO_PASS=["t"],
        problem_statement="Fix the parser.",
    )
    rows = [{"id": "a", "prompt": "Say hello.", "verifier": "trl_test_greeting_prefix"}, row]
    rollout = EvsysRolloutFunc(rows, model="local")
    assert rollout.dataset(repeats=2)["prompt"] == ["Say hello.", "Fix the parser."] * 2
    with pytest.raises(ValueError, match="share the prompt"):
        EvsysRolloutFunc([rows[0], {**rows[0], "id": "b"}], model="local")
    with pytest.raises(ValueError, match="model="):
        EvsysRolloutFunc(rows)


@pytest.mark.needs_model
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_grpo_trains_on_rollouts_evsys_runs(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    model_dir = build_tiny_model(DEMO_RECIPE)
    task = VerifiedTask(id="hello", prompt=DEMO_GREETING[0]["content"], verifier="trl_test_greeting_prefix")
    jobs = tmp_path / "jobs"
    synced: list[tuple[int, Path]] = []

    def save_weights(trainer: Any) -> str:
        """On-policy: the trainer's current weights, saved where the local engine loads them from."""
        target = tmp_path / f"policy-step-{trainer.state.global_step}"
        trainer.model.save_pretrained(target)
        trainer.processing_class.save_pretrained(target)
        synced.append((trainer.state.global_step, target))
        return f"local:{target}"

    rollout = EvsysRolloutFunc(
        [task],
        model=f"local:{model_dir}",
        max_tokens=12,
        temperature=TEMPERATURE,
        jobs_dir=jobs,
        sync_weights=save_weights,
    )
    returned: list[dict[str, Any]] = []

    def recording(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        output = rollout(prompts, trainer)
        returned.append(output)
        return output

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    before = weights(model)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=evsys_reward,
        args=grpo_config(
            tmp_path / "out",
            temperature=TEMPERATURE,
            per_device_train_batch_size=GROUP,
            num_generations=GROUP,
        ),
        train_dataset=rollout.dataset(repeats=2 * GROUP),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        rollout_func=recording,
    )
    trainer.train()

    # one evsys job per batch, a trial per completion, each verified and recorded
    assert len(returned) == 2
    job_dirs = sorted(jobs.iterdir(), key=lambda d: d.stat().st_mtime)
    assert len(job_dirs) == 2
    for job_dir, output in zip(job_dirs, returned, strict=True):
        results = {}
        for trial in output["evsys_trial"]:
            results[trial] = TrialResult.model_validate_json((job_dir / trial / "result.json").read_text())
        assert all(r.failure is None for r in results.values())
        assert output["evsys_reward"] == [results[t].reward for t in output["evsys_trial"]]
        # TRL got exactly the tokens and sampling logprobs evsys recorded for each trial
        for i, trial in enumerate(output["evsys_trial"]):
            raw = json.loads((job_dir / trial / "trajectory.json").read_text())
            tokens = flatten_tokens(Trajectory.model_validate(raw))
            assert output["prompt_ids"][i] == tokens.prompt_token_ids
            assert output["completion_ids"][i] == tokens.completion_token_ids
            assert output["logprobs"][i] == tokens.logprobs
            assert len(tokens.completion_token_ids) > 0
    # the verifier's rewards are what TRL logged and optimised
    rewards = [output["evsys_reward"] for output in returned]
    logged = [e["rewards/evsys_reward/mean"] for e in trainer.state.log_history if "loss" in e]
    assert logged == pytest.approx([sum(r) / len(r) for r in rewards])
    assert any(len(set(r)) > 1 for r in rewards), rewards
    assert changed(before, trainer.model)
    # the second batch was sampled from the weights after the first step: its recorded logprobs are those
    # weights' (teacher-forced recompute), not the initial model's
    assert [step for step, _ in synced] == [1]
    second = returned[1]
    with_synced = recompute(synced[0][1], second["prompt_ids"], second["completion_ids"])
    with_initial = recompute(model_dir, second["prompt_ids"], second["completion_ids"])
    recorded = [x for row in second["logprobs"] for x in row]
    assert max(abs(a - b) for a, b in zip(recorded, with_synced, strict=True)) < 1e-3
    assert max(abs(a - b) for a, b in zip(recorded, with_initial, strict=True)) > 1e-3


def recompute(model_dir: Path, prompts: list[list[int]], completions: list[list[int]]) -> list[float]:
    """Teacher-forced raw-distribution logprobs of every completion token under the weights in `model_dir`."""
    from evsys.model.local.engine import LocalEngine

    engine = LocalEngine.load(model_dir)
    return [x for p, c in zip(prompts, completions, strict=True) for x in engine.score(p, c)]


def test_a_directory_of_task_directories_is_its_tasks(examples_dir: Path) -> None:
    """The path string is loaded as `evsys run` loads it, not iterated character by character."""
    rollout = EvsysRolloutFunc(str(examples_dir / "tasks"), model="local")
    instructions = [row["prompt"] for row in rollout.dataset().to_list()]
    assert len(instructions) == 8
    assert any("statistics" in text.lower() or "bug" in text.lower() for text in instructions)
